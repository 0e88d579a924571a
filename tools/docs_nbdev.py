"""nbdev's notebook processing for the docs, with saved outputs only.

nbdev's `exec_show_docs` runs every cell that contains an import so `show_doc` can see the
symbols; a cell that mixes imports with other code ("Found cells containing imports and other
code", nbdev FAQ) is then re-executed in full and its saved outputs replaced, or it fails when
it needs state from cells that were not run. `DocsFilter` keeps nbdev's processors and order but
runs only what `show_doc` needs: exported cells, `show_doc` cells, `exec_doc` cells, and the
import statements of other cells. No other code runs; every other output is the saved one.
"""
import ast
from nbdev.processors import FilterDefaults, exec_show_docs, _show_docs, cell_lang
from fastcore.basics import str2bool

_show_dirs = {'export', 'exports', 'exporti', 'exec_doc'}

def _eval_plan(cell):
    "None (skip), 'cell' (run the cell as nbdev does), or source of the cell's import statements."
    if cell.cell_type != 'code' or cell_lang(cell) != 'python': return None
    if not cell.source or 'nbdev_export' + '()' in cell.source: return None
    trees = cell.parsed_()
    if not trees: return None
    if cell.directives_.get('eval:', [''])[0].lower() == 'false': return None
    if cell.directives_.keys() & _show_dirs: return 'cell'
    if _show_docs(trees): return 'cell'
    imports = [n for n in trees if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports: return None
    return '\n'.join(ast.unparse(n) for n in imports)

class exec_show_docs_saved(exec_show_docs):
    "`exec_show_docs` that runs only what `show_doc` needs and never replaces saved outputs."
    def __call__(self, cell):
        if not self.nb.has_docs_ or not hasattr(self, 'k'): return
        fm = getattr(self.nb, 'frontmatter_', {})
        if str2bool(fm.get('skip_showdoc', False)): return
        plan = _eval_plan(cell)
        if plan is None: return
        if plan == 'cell':
            self.k.cell(cell)
        else:
            self.k.run(plan)
        if self.k.exc:
            title = fm.get('title', '')
            raise Exception(f"Error{' in notebook: ' + title if title else ''} in cell {cell.idx_} :\n"
                            f"{cell.source if plan == 'cell' else plan}") from self.k.exc

class DocsFilter(FilterDefaults):
    "nbdev's default processors, with `exec_show_docs_saved` in place of `exec_show_docs`."
    def base_procs(self):
        return [exec_show_docs_saved if p is exec_show_docs else p for p in super().base_procs()]
