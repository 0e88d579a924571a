#!/usr/bin/env python
"""Build the minillm docs site into `_site/` without Quarto.

Steps (each fails loudly):
  1. nbdev's own notebook processing (what `nbdev_proc_nbs` does, minus installing Quarto):
     `refresh_quarto_yml`, `_build_modidx`, `nbdev_sidebar`, `nbdev.serve.proc_nbs` -> `_proc/`.
     Notebooks are not re-executed: only `show_doc` cells run, saved outputs are kept.
  2. Translate the processed notebooks' Quarto-only syntax to MyST (front matter, `#|` options,
     callouts, `show_doc` output, nbdev anchors and links, widget reprs) -> `_build/docs_src/`.
     Page order and grouping come from `nbs/sidebar.yml`, so Quarto and Sphinx show the same book.
  3. `sphinx-build -W` with myst-nb (execution off) and sphinx-book-theme -> `_site/`.
  4. Write `_build/docs_manifest.json`: what the browser check must find on every page.
"""
from __future__ import annotations
import ast, configparser, io, json, os, re, shutil, subprocess, sys, time, tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'
PROC = ROOT/'_proc'
BUILD = ROOT/'_build'
SRC = BUILD/'docs_src'
SITE = ROOT/'_site'
CONF_DIR = ROOT/'tools'/'sphinx'
MANIFEST = BUILD/'docs_manifest.json'

class DocsError(Exception): pass

if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))       # the library, to tell classes from functions

def log(*a): print('docs-build:', *a, flush=True)

# ----------------------------------------------------------------------------- settings
def settings():
    cp = configparser.ConfigParser()
    cp.read(ROOT/'settings.ini')
    return cp['DEFAULT']

def site_prefixes(cfg):
    "Absolute URL prefixes of the published site; links under them are internal."
    host, base = cfg.get('doc_host', ''), cfg.get('doc_baseurl', '')
    res = {(host + base).rstrip('/') + '/'}
    return [p for p in res if p.startswith('http')]

# ----------------------------------------------------------------------------- step 1: nbdev processing
def nbdev_process():
    "Run the functions behind `nbdev_proc_nbs`, without its Quarto install."
    os.chdir(ROOT)
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    import nbdev.serve, nbdev.doclinks
    from nbdev.serve import proc_nbs
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from docs_nbdev import DocsFilter
    # notebooks get `DocsFilter` (nbdev's processors; show_doc runs, nothing else re-executes)
    _orig = nbdev.serve._proc_file
    def _proc_file(*a, **k):
        r = _orig(*a, **k)
        return (r[0], r[1], DocsFilter) if isinstance(r, tuple) and r[2] is nbdev.serve.FilterDefaults else r
    nbdev.serve._proc_file = _proc_file
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    nbdev_sidebar.__wrapped__()          # no-op with custom_sidebar = True: sidebar.yml is hand-written
    if PROC.exists(): shutil.rmtree(PROC)
    proc_nbs(n_workers=min(2, os.cpu_count() or 1), force=True)
    if not PROC.exists(): raise DocsError('nbdev processing produced no _proc folder')

# ----------------------------------------------------------------------------- sidebar
def read_sidebar():
    "Parse `nbs/sidebar.yml` into [(section caption or None, [notebook paths])]."
    import yaml
    y = yaml.safe_load((NBS/'sidebar.yml').read_text())
    try: contents = y['website']['sidebar']['contents']
    except (KeyError, TypeError): raise DocsError('nbs/sidebar.yml: expected website.sidebar.contents')
    groups = []
    def entry_path(e):
        if isinstance(e, str): return e
        if isinstance(e, dict) and 'href' in e: return e['href']
        if isinstance(e, dict) and 'file' in e: return e['file']
        return None
    def flatten(items, out):
        for e in items or []:
            if isinstance(e, dict) and 'section' in e: flatten(e.get('contents'), out)
            else:
                p = entry_path(e)
                if p is None: raise DocsError(f'nbs/sidebar.yml: cannot read entry {e!r}')
                out.append(p)
        return out
    top = []
    for e in contents:
        if isinstance(e, dict) and 'section' in e:
            if top: groups.append((None, top)); top = []
            groups.append((str(e['section']), flatten(e.get('contents'), [])))
        else: top += flatten([e], [])
    if top: groups.append((None, top))
    return groups

# ----------------------------------------------------------------------------- modidx
def load_modidx():
    p = ROOT/settings().get('lib_path', 'minillm')/'_modidx.py'
    g = {}
    exec(p.read_text(), g)
    return g['d']

# words of five letters or more that Sphinx's English search drops (its language_data.js), so never a chapter's search term
SEARCH_STOPWORDS = {'about', 'above', 'because', 'cannot', 'herself', 'himself', 'myself', 'after', 'again', 'against', 'below', 'between', 'being', 'before', 'could', 'doing', 'during',
                    'further', 'having', 'itself', 'other', 'ought', 'ourselves', 'should', 'their', 'theirs', 'themselves', 'there',
                    'these', 'those', 'through', 'under', 'until', 'where', 'which', 'while', 'would', 'yours', 'yourself', 'yourselves'}

def exported_symbols():
    "{module: [names in __all__]} for every library module."
    lib = ROOT/settings().get('lib_path', 'minillm')
    res = {}
    for f in sorted(lib.glob('*.py')):
        if f.name.startswith('_'): continue
        tree = ast.parse(f.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '__all__' for t in node.targets):
                # a computed __all__ (minillm.all re-exports the chapters' APIs) documents nothing of its own
                try: res[f'{lib.name}.{f.stem}'] = list(ast.literal_eval(node.value))
                except ValueError: continue
    return res

# ----------------------------------------------------------------------------- translation helpers
_re_opt = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
_re_widget_repr = re.compile(r'^\s*(?:\w+\.)*(VBox|HBox|GridBox|Box|Tab|Accordion|Stack|interactive|IntSlider|FloatSlider|'
                             r'FloatLogSlider|IntRangeSlider|FloatRangeSlider|SelectionSlider|Dropdown|RadioButtons|Select|'
                             r'ToggleButtons|ToggleButton|Checkbox|Button|Text|Textarea|IntText|FloatText|BoundedIntText|'
                             r'BoundedFloatText|Play|Output|Label|HTML|HTMLMath|Image|Layout|Combobox|ColorPicker)\((children|value|'
                             r'description|layout|options|outputs|msg_id|min|max)=', re.S)
_re_fig_repr = re.compile(r'^<(Figure|matplotlib\.\S+) size [\d.]+x[\d.]+ with \d+ Axes>$')
_re_widget_src = re.compile(r'(^|\W)(interact|interactive|interact_manual)\(|(^|\W)(widgets|ipywidgets)\.\w+\(|@interact\b', re.M)
_re_progress = re.compile(r'\d+%\||\|\s*\d+/\d+|it/s\]|s/it\]')
WIDGET_MIMES = ('application/vnd.jupyter.widget-view+json', 'application/vnd.jupyter.widget-state+json')

def src_text(s): return ''.join(s) if isinstance(s, list) else (s or '')

def parse_opts(source):
    "Split leading `#| key: value` lines off a code cell; returns (opts, body)."
    lines, opts, i = source.splitlines(), {}, 0
    while i < len(lines) and (lines[i].strip() == '' or lines[i].lstrip().startswith('#|')):
        m = _re_opt.match(lines[i])
        if m:
            v = m.group(2)
            if len(v) >= 2 and v[0] == v[-1] and v[0] in '"\'': v = v[1:-1]
            opts[m.group(1).lower()] = v
        i += 1
    # `#|` lines can also appear later (nbdev allows it); drop them everywhere
    body = [l for l in lines[i:] if not l.lstrip().startswith('#|')]
    return opts, '\n'.join(body).strip('\n')

def pandoc_id(text):
    "The id pandoc (Quarto) gives a heading: lowercase, keep alnum _ - ., spaces to hyphens."
    t = re.sub(r'[^\w\s.-]', '', text.lower(), flags=re.U)
    t = re.sub(r'\s+', '-', t.strip())
    return re.sub(r'^[^a-z]+', '', t) or 'section'

def docutils_id(text):
    from docutils.nodes import make_id
    return make_id(text)

# Quarto callouts -> MyST admonitions
_re_div_open = re.compile(r'^(\s*)(:{3,})\s*(\{[^}]*\}|[\w-]+)?\s*(.*)$')
CALLOUTS = {'note': 'note', 'tip': 'tip', 'warning': 'warning', 'important': 'important', 'caution': 'caution'}

def translate_divs(md, where, warnings):
    "Translate Quarto fenced divs (`::: {.callout-note}` ...) into MyST colon-fence directives."
    out, stack = [], []
    lines = md.split('\n')
    in_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(('```', '~~~')): in_code = not in_code
        m = None if in_code else _re_div_open.match(line)
        if m and (m.group(3) or m.group(4) == ''):
            indent, colons, attr, rest = m.groups()
            if attr is None and rest == '' and stack:          # closing fence
                kind, fence = stack.pop()
                if kind == 'myst': out.append(line)
                elif kind != 'drop': out.append(indent + fence)
                i += 1; continue
            if attr is None: out.append(line); i += 1; continue
            if not attr.startswith('{') or re.fullmatch(r'\{[\w:-]+\}', attr):   # a MyST directive, not a Quarto div
                out.append(line); stack.append(('myst', colons)); i += 1; continue
            classes = re.findall(r'\.([\w-]+)', attr)
            kv = dict(re.findall(r'([\w-]+)\s*=\s*"([^"]*)"', attr))
            callout = next((c[len('callout-'):] for c in classes if c.startswith('callout-')), None)
            fence = ':' * max(4, len(colons) + 1 + len(stack))
            if callout is not None:
                kind = CALLOUTS.get(callout, 'note')
                title = kv.get('title')
                # Quarto takes a heading on the first line of the callout as its title
                j = i + 1
                while j < len(lines) and lines[j].strip() == '': j += 1
                if title is None and j < len(lines) and re.match(r'^#{1,6}\s', lines[j]):
                    title = re.sub(r'^#{1,6}\s+', '', lines[j]).strip()
                    lines[j] = ''
                extra = ['dropdown'] if kv.get('collapse', '').lower() == 'true' else []
                if title:
                    out += [f'{indent}{fence}{{admonition}} {title}', f'{indent}:class: {" ".join([kind] + extra)}']
                else:
                    out.append(f'{indent}{fence}{{{kind}}}')
                    if extra: out.append(f'{indent}:class: {" ".join(extra)}')
                out.append('')
                stack.append(('callout', fence))
            elif 'column-margin' in classes or 'aside' in classes:
                out += [f'{indent}{fence}{{margin}}', '']
                stack.append(('margin', fence))
            else:
                warnings.append(f'{where}: fenced div {attr} has no MyST equivalent; kept its content')
                stack.append(('drop', ''))
            i += 1; continue
        out.append(line); i += 1
    if stack: raise DocsError(f'{where}: unclosed ::: fenced div')
    return '\n'.join(out)

_re_heading_attr = re.compile(r'^(#{1,6})\s+(.*?)\s*\{([^}]*)\}\s*$')

def has_math(md:str) -> bool:
    "Whether markdown has TeX maths: a `$` that opens an expression, or an environment, outside code (a `$ref` in backticks is code)."
    md = re.sub(r'```.*?```', '', md, flags=re.S)
    md = re.sub(r'(`+).*?\1', '', md, flags=re.S)
    return bool(re.search(r'(?<!\\)\$[^$\s]', md)) or '\\begin{' in md

def translate_headings(md):
    "`## Title {#anchor .unnumbered}` -> a MyST label line plus a plain heading."
    out, in_code = [], False
    for line in md.split('\n'):
        if line.lstrip().startswith(('```', '~~~')): in_code = not in_code
        m = None if in_code else _re_heading_attr.match(line)
        if m:
            hashes, text, attrs = m.groups()
            ids = re.findall(r'#([\w.:-]+)', attrs)
            if ids: out += [f'({ids[0]})=']
            out.append(f'{hashes} {text}')
        else: out.append(line)
    return '\n'.join(out)

_re_md_link = re.compile(r'(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(\s+"[^"]*")?\)')

class Links:
    "Rewrites links to the published site, to notebooks and to nbdev doc anchors."
    def __init__(self, prefixes, nb2doc, anchor2sym, documented):
        self.prefixes, self.nb2doc, self.anchor2sym, self.documented = prefixes, nb2doc, anchor2sym, documented

    def target(self, url):
        "Return ('doc', docname, frag) for internal targets, else None."
        for p in self.prefixes:
            if url.startswith(p): url = url[len(p):]; break
        else:
            if re.match(r'^[a-z][\w+.-]*:', url) or url.startswith(('/', '#')): return None
        path, _, frag = url.partition('#')
        name = Path(path).name
        if path.endswith('.ipynb') and name in self.nb2doc: return ('doc', self.nb2doc[name], frag)
        if path.endswith('.html'):
            stem = name[:-5]
            if stem in self.nb2doc.values(): return ('doc', stem, frag)
        return None

    def __call__(self, md):
        def sub(m):
            bang, text, url, title = m.groups()
            if bang: return m.group(0)
            t = self.target(url)
            if t is None: return m.group(0)
            _, doc, frag = t
            sym = self.anchor2sym.get(f'{doc}.html#{frag}') if frag else None
            if sym:
                # a link nbdev made to an API entry: a Sphinx cross-reference to that entry, or to the
                # entry of its class when the symbol itself (a method) has none
                label = text.strip('`') if text.startswith('`') and text.endswith('`') else text
                target = sym
                while target not in self.documented and target.count('.') > 1: target = target.rsplit('.', 1)[0]
                if target in self.documented and target.count('.') > 1: return f'{{py:obj}}`{label} <{target}>`'
                return text                                   # nothing documents it: keep the code, drop the link
            return f'[{text}]({doc}.ipynb{"#" + frag if frag else ""})'
        out, in_code = [], False
        for line in md.split('\n'):
            if line.lstrip().startswith(('```', '~~~')): in_code = not in_code
            out.append(line if in_code else _re_md_link.sub(sub, line))
        return '\n'.join(out)

# ----------------------------------------------------------------------------- show_doc -> API entries
_re_sd_heading = re.compile(r'^(#{2,6})\s+(.+?)\s*(\{#([^}]*)\})?\s*$')
_re_sd_code = re.compile(r'```(?:python)?\n(.*?)\n```', re.S)

def split_signature(code):
    "Signature text from show_doc's code block -> (kind, arglist, returns, {param: docments comment})."
    comments, lines = {}, code.splitlines()
    try: toks = list(tokenize.generate_tokens(io.StringIO(code + '\n').readline))
    except (tokenize.TokenError, IndentationError, SyntaxError): toks = []
    depth, expect, last = 0, False, None
    for t in toks:
        if t.type == tokenize.COMMENT:
            k = last if depth >= 1 else 'return'
            if k: comments[k] = t.string.lstrip('#').strip()
            r, c = t.start
            lines[r-1] = lines[r-1][:c] + ' ' * (len(lines[r-1]) - c)     # blank the comment out
            continue
        if t.type == tokenize.OP and t.string in '([{':
            depth += 1
            if depth == 1 and t.string == '(': expect = True
            continue
        if t.type == tokenize.OP and t.string in ')]}': depth -= 1; continue
        if depth == 1 and t.type == tokenize.OP and t.string == ',': expect = True; continue
        if depth == 1 and expect and t.type == tokenize.NAME: last, expect = t.string, False
    flat = re.sub(r'\s+', ' ', ' '.join(lines)).strip()
    m = re.match(r'^(async\s+def|def|class)\s+([\w.]+)\s*(\((.*)\))?\s*(->\s*(.*?))?\s*:?\s*$', flat)
    if not m: return None
    kind = 'class' if m.group(1) == 'class' else 'def'
    args = (m.group(4) or '').strip().rstrip(',').strip()
    ret = (m.group(6) or '').strip() or None
    return kind, args, ret, comments

def _valid_arglist(args):
    try: ast.parse(f'def _f({args}): pass'); return True
    except SyntaxError: return False

class ApiEntries:
    "Turns nbdev's markdown `show_doc` output into Sphinx Python-domain entries with stable anchors."
    def __init__(self, modidx, page_module):
        self.syms = {k2: v for k, v in modidx['syms'].items() for k2, v in v.items()}
        self.page_module = page_module
        self.seen = set()            # full names already described (a second description is :no-index:)
        self.by_page = {}            # docname -> [entries]
        self.constants = {}          # docname -> constants_plan(...)

    def resolve(self, name, doc):
        "Full dotted name of `name` documented on page `doc`, via _modidx."
        anchor = f'{doc}.html#{pandoc_id(name)}'
        cands = [k for k, v in self.syms.items() if k.endswith('.' + name)]
        exact = [k for k in cands if self.syms[k][0] == anchor]
        if exact: return exact[0]
        if len(cands) == 1: return cands[0]
        mod = self.page_module.get(doc)
        if mod and f'{mod}.{name}' in self.syms: return f'{mod}.{name}'
        return None

    def kind_of(self, full, sigkind, has_sig):
        import importlib, inspect
        if full:
            parts = full.split('.')
            for i in range(len(parts) - 1, 0, -1):
                try: obj = importlib.import_module('.'.join(parts[:i]))
                except ImportError: continue
                try:
                    owner = None
                    for p in parts[i:]: owner, obj = obj, inspect.getattr_static(obj, p)
                except AttributeError: break
                if isinstance(obj, property): return 'property'
                if inspect.isclass(obj): return 'class'
                if isinstance(obj, (staticmethod,)): return 'staticmethod'
                if isinstance(obj, classmethod): return 'classmethod'
                if len(parts) - i > 1: return 'method'
                return 'function' if callable(obj) else 'data'
        if sigkind == 'class': return 'class'
        return 'function' if has_sig else 'data'

    def kind_for(self, full, name, sigkind, has_sig):
        k = self.kind_of(full, sigkind, has_sig)
        if k == 'function' and '.' in name: return 'method'
        return k

    def __call__(self, md, doc, where, warnings):
        "Markdown of one show_doc output -> MyST markdown."
        md = md.strip()
        md = re.sub(r'^(---|\*\*\*|___)\s*\n', '', md).strip()        # the rule show_doc puts first
        lines = md.split('\n')
        source_url = None
        while lines and not _re_sd_heading.match(lines[0]):
            sm = re.match(r'^\[source\]\((\S+?)\)(\{[^}]*\})?\s*$', lines[0].strip())
            if sm: source_url = sm.group(1)
            elif lines[0].strip(): break
            lines = lines[1:]
        m = _re_sd_heading.match(lines[0]) if lines else None
        if not m: return md                                            # not a show_doc block
        name = lines[0][len(m.group(1)):].strip()
        if m.group(3): name = name[:name.rfind('{')].strip()
        name = re.sub(r'\\(.)', r'\1', name).strip('`* ')
        rest = '\n'.join(lines[1:]).strip()
        sig = None
        cm = _re_sd_code.search(rest)
        if cm and rest[:cm.start()].strip() == '':
            sig = split_signature(cm.group(1))
            rest = rest[cm.end():].strip()
        full = self.resolve(name, doc)
        kind = self.kind_for(full, name, sig[0] if sig else None, sig is not None)
        anchor = m.group(4) or pandoc_id(name)
        opts = []
        if full:
            mod = full[:-(len(name) + 1)] if full.endswith('.' + name) else full.rsplit('.', 1)[0]
            local = full[len(mod) + 1:]
            opts.append(f':module: {mod}')
        else:
            mod, local = None, name
            warnings.append(f'{where}: show_doc({name}) is not in _modidx; its entry is not indexed')
        if full is None or full in self.seen: opts.append(':no-index:')
        if full: self.seen.add(full)
        args, ret, comments = ('', None, {}) if sig is None else sig[1:]
        if args and not _valid_arglist(re.sub(r'<[\w .-]+>', '_', args)):      # `<factory>` defaults are fine as text
            warnings.append(f'{where}: could not parse the signature of {name}; shown as text')
        directive = {'function': 'py:function', 'class': 'py:class', 'method': 'py:method', 'property': 'py:property',
                     'classmethod': 'py:method', 'staticmethod': 'py:method', 'data': 'py:data'}[kind]
        if kind == 'classmethod': opts.append(':classmethod:')
        if kind == 'staticmethod': opts.append(':staticmethod:')
        if kind in ('property', 'data'): head = local
        else: head = f'{local}({args})' + (f' -> {ret}' if ret and kind != 'class' else '')
        body = rest
        if comments:
            rows = ['| Parameter | Details |', '|---|---|'] + [f'| `{k}` | {v.replace("|", "&#124;")} |' for k, v in comments.items()]
            if '| **Details** |' not in body and '| Details |' not in body: body = (body + '\n\n' + '\n'.join(rows)).strip()
        pre = ''
        consts = self.constants.get(doc, {})
        if name in consts and full: pre = constant_entries(consts.pop(name), full.rsplit('.' + name, 1)[0], self, doc)
        if source_url: body = f'[source]({source_url}){{.api-source}}\n\n' + body
        fence = '::::'
        while fence in body: fence += ':'
        entry = dict(name=name, full=full, anchor=anchor, kind=kind, id=full if (full and ':no-index:' not in opts) else None)
        self.by_page.setdefault(doc, []).append(entry)
        return pre + (f'<span class="nbdev-anchor" id="{anchor}"></span>\n\n' if anchor else '') + \
               f'{fence}{{{directive}}} {head}\n' + '\n'.join(opts) + '\n\n' + body + f'\n{fence}\n'

def constants_plan(nb_path, module, exported):
    "Exported names that are not functions or classes: {anchor symbol or None: [(name, value, doc)]}."
    nb = json.loads(Path(nb_path).read_text())
    want = set(exported.get(module, []))
    plan, pending = {}, []
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        opts, body = parse_opts(src_text(c['source']))
        if not ({'export', 'exports'} & set(opts)): continue
        try: tree = ast.parse(body)
        except SyntaxError: continue
        lines = body.splitlines()
        first_def = None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if first_def is None and node.name in want: first_def = node.name
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, 'value', None)
            comment = ''
            line = lines[node.end_lineno - 1]
            cm = re.search(r'#\s*(.*)$', line)
            if cm and "'" not in line[cm.start():] and '"' not in line[cm.start():]: comment = cm.group(1).strip()
            for t in targets:
                names = [t] if isinstance(t, ast.Name) else list(getattr(t, 'elts', []))
                vals = [value] * len(names)
                if isinstance(value, ast.Tuple) and len(value.elts) == len(names) and len(names) > 1: vals = value.elts
                for n, v in zip(names, vals):
                    if isinstance(n, ast.Name) and n.id in want:
                        seg = ast.get_source_segment(body, v) if v is not None else None
                        pending.append((n.id, seg, comment))
        if first_def and pending: plan.setdefault(first_def, []).extend(pending); pending = []
    if pending: plan.setdefault(None, []).extend(pending)
    return plan

def constant_entries(items, module, api, doc):
    out = []
    for name, value, comment in items:
        full = f'{module}.{name}'
        one = ' '.join(value.split()) if value else ''                  # one line; long values (a text constant) cut with an ellipsis
        if len(one) > 120: one = one[:117] + '...'
        opts = [f':module: {module}'] + ([f':value: {json.dumps(one)}'] if one else [])   # quoted, so YAML never parses the text
        if full in api.seen: opts.append(':no-index:')
        api.seen.add(full)
        api.by_page.setdefault(doc, []).append(dict(name=name, full=full, anchor=pandoc_id(name), kind='data', id=full))
        out.append(f'<span class="nbdev-anchor" id="{pandoc_id(name)}"></span>\n\n::::{{py:data}} {name}\n' + '\n'.join(opts) +
                   f'\n\n{comment}\n::::\n')
    return '\n'.join(out)

def full_or(a, b): return a if a is not None else b

# ----------------------------------------------------------------------------- notebook translation
def translate_nb(nb, src_name, doc, ctx):
    "Processed nbdev notebook -> MyST-NB notebook. Returns (notebook, page facts for the check)."
    cells, facts = [], dict(doc=doc, source=src_name, title=None, images=0, math=False, hidden=[], widgets=[])
    widget_at = None                 # index (in `cells`) of the last widget cell still waiting for its static figure
    warnings = ctx['warnings']
    fm = {}
    title_done = False
    for ci, cell in enumerate(nb['cells']):
        ct, source = cell['cell_type'], src_text(cell.get('source'))
        where = f'{src_name} cell {ci}'
        if ct == 'raw':
            s = source.strip()
            if s.startswith('---') and s.count('---') >= 2 and not title_done:
                import yaml
                fm = yaml.safe_load(s.strip('-\n').split('\n---')[0]) or {}
                title = fm.get('title')
                if title:
                    md = f'# {title}\n'
                    if fm.get('description'): md += f'\n{{.description}}\n{fm["description"]}\n'
                    cells.append(dict(cell_type='markdown', metadata={}, source=md))
                    facts['title'] = str(title); title_done = True
                continue
            if s: warnings.append(f'{where}: raw cell dropped')
            continue
        if ct == 'markdown':
            if re.fullmatch(r'\s*<!--.*?-->\s*', source, re.S): continue       # nbdev's "autogenerated" warning
            md = translate_headings(translate_divs(source, where, warnings))
            md = ctx['links'](md)
            if has_math(md): facts['math'] = True
            if not facts['title']:
                hm = re.match(r'^\s*#\s+(.+)$', md, re.M)
                if hm: facts['title'] = hm.group(1).strip(); title_done = True
            facts['images'] += len(re.findall(r'!\[[^\]]*\]\(', md)) + len(re.findall(r'<img\s', md))
            cells.append(dict(cell_type='markdown', metadata={}, source=md))
            continue
        if ct != 'code': continue
        opts, body = parse_opts(source)
        echo = opts.get('echo', 'true').lower() != 'false'
        include = opts.get('include', 'true').lower() != 'false'
        output_opt = opts.get('output', 'true').lower()
        if not include:
            if body.strip(): facts['hidden'].append(body)
            continue
        if not echo and body.strip(): facts['hidden'].append(body)
        new_outputs, asis_md, is_widget = [], [], bool(_re_widget_src.search(body))
        for o in cell.get('outputs', []):
            data = o.get('data', {})
            if any(k in data for k in WIDGET_MIMES):        # a live widget: a static site cannot run it
                if not _re_progress.search(src_text(data.get('text/plain', ''))): is_widget = True   # (a tqdm bar is no view)
                continue
            if output_opt == 'asis' and 'text/markdown' in data:
                asis_md.append(src_text(data['text/markdown'])); continue
            if output_opt == 'asis' and o.get('output_type') == 'stream':
                asis_md.append(src_text(o.get('text'))); continue
            plain = src_text(data.get('text/plain', ''))
            if set(data) <= {'text/plain'} and o.get('output_type') in ('execute_result', 'display_data'):
                if _re_widget_repr.match(plain) or _re_fig_repr.match(plain.strip()):
                    ctx['dropped_reprs'].append(f'{where}: {plain.strip()[:60]}')
                    if _re_widget_repr.match(plain): is_widget = True
                    continue
            if any(k.startswith('image/') for k in data): facts['images'] += 1
            if 'text/markdown' in data and set(data) <= {'text/markdown', 'text/plain'}:
                data = dict(data); data['text/markdown'] = ctx['links'](translate_divs(src_text(data['text/markdown']), where, warnings))
                o = dict(o, data=data)
            new_outputs.append(o)
        # `output: asis` markdown (show_doc and friends) becomes a markdown cell
        for md in asis_md:
            md = ctx['api'](translate_divs(md, where, warnings), doc, where, warnings)
            md = ctx['links'](translate_headings(md))
            if has_math(md): facts['math'] = True
            if echo and body.strip():
                cells.append(dict(cell_type='code', metadata={}, source=body, outputs=[], execution_count=None))
                echo = False
            cells.append(dict(cell_type='markdown', metadata={}, source=md))
        if output_opt == 'false': new_outputs = []
        # a widget needs a static figure of the same view: in its own saved outputs or in one of the next code cells
        has_img = any(any(k.startswith('image/') for k in o.get('data', {})) for o in new_outputs)
        if widget_at is not None and has_img: facts['widgets'][-1]['static_figure'] = True; widget_at = None
        elif widget_at is not None and ci - widget_at > 3: widget_at = None
        if is_widget:
            facts['widgets'].append(dict(cell=ci, code=(body.strip().splitlines() or [''])[0][:70], static_figure=has_img))
            widget_at = None if has_img else ci
        if asis_md and not new_outputs: continue
        tags, meta = [], {}
        if not echo: tags.append('remove-input')
        fold = opts.get('code-fold', '').lower()
        if echo and fold in ('true', 'hide'): tags.append('hide-input')
        if not body.strip(): tags.append('remove-input')
        if not new_outputs and 'remove-input' in tags: continue
        cap = opts.get('fig-cap') or opts.get('fig_cap')
        if cap and any(any(k.startswith('image/') for k in o.get('data', {})) for o in new_outputs):
            meta['mystnb'] = {'figure': {'caption': cap}}
            if opts.get('label'): meta['mystnb']['figure']['name'] = opts['label']
        if tags: meta['tags'] = sorted(set(tags))
        cells.append(dict(cell_type='code', metadata=meta, source=body, outputs=new_outputs,
                          execution_count=cell.get('execution_count')))
    if not facts['title']: raise DocsError(f'{src_name}: no title (front matter or a leading `# Title` cell)')
    left = ctx['api'].constants.get(doc, {})
    items = [it for k in list(left) for it in left.pop(k)]
    if items:
        mod = ctx['api'].page_module.get(doc)
        cells.append(dict(cell_type='markdown', metadata={}, source='## Constants\n\n' + constant_entries(items, mod, ctx['api'], doc)))
    out = dict(nbformat=4, nbformat_minor=5, cells=cells,
               metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'},
                         'language_info': {'name': 'python', 'pygments_lexer': 'ipython3'}})
    for i, c in enumerate(out['cells']):
        c['id'] = f'c{i:04d}'
        if c['cell_type'] == 'markdown': c.pop('outputs', None); c.pop('execution_count', None)
    return out, facts

# ----------------------------------------------------------------------------- index / toctree
def toctree_md(groups, nb2doc, root_doc):
    parts = []
    for caption, nbs in groups:
        docs = [nb2doc[Path(n).name] for n in nbs if nb2doc[Path(n).name] != root_doc]
        if not docs: continue
        head = f':::{{toctree}}\n:hidden:\n:maxdepth: 2\n' + (f':caption: {caption}\n' if caption else '')
        parts.append(head + '\n' + '\n'.join(docs) + '\n:::\n')
    return '\n'.join(parts)

# ----------------------------------------------------------------------------- main build
def build(skip_proc=False):
    t0 = time.time()
    cfg = settings()
    if not skip_proc:
        log('processing notebooks with nbdev (no re-execution)')
        nbdev_process()
    groups = read_sidebar()
    listed = [p for _, ps in groups for p in ps]
    missing = [p for p in listed if not (NBS/p).exists()]
    if missing:
        raise DocsError('nbs/sidebar.yml lists notebooks that do not exist: ' + ', '.join(missing) +
                        ' (add the notebook or remove it from sidebar.yml)')
    nonnb = [p for p in listed if not p.endswith('.ipynb')]
    if nonnb: raise DocsError('nbs/sidebar.yml: only notebooks are supported in this build: ' + ', '.join(nonnb))
    all_nbs = sorted(p.name for p in NBS.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    unlisted = [n for n in all_nbs if n not in {Path(p).name for p in listed}]
    for n in unlisted: log(f'WARNING: {n} is not in nbs/sidebar.yml, so it is not on the site')
    if listed[0] != 'index.ipynb' and 'index.ipynb' in listed:
        raise DocsError('nbs/sidebar.yml: index.ipynb must come first')

    import yaml
    modidx = load_modidx()
    exported = exported_symbols()
    # docname of every listed notebook: nbdev's output-file (00_model.ipynb -> model.html), as on the Quarto site
    nb2doc, procd = {}, {}
    for p in listed:
        name = Path(p).name
        pp = PROC/p
        if not pp.exists(): raise DocsError(f'nbdev processing did not produce {pp.relative_to(ROOT)}')
        nb = json.loads(pp.read_text())
        fm = {}
        if nb['cells'] and nb['cells'][0]['cell_type'] == 'raw':
            s = src_text(nb['cells'][0]['source']).strip()
            if s.startswith('---'): fm = yaml.safe_load(s.strip('-\n').split('\n---')[0]) or {}
        doc = Path(fm.get('output-file', Path(p).stem + '.html')).stem
        if doc in nb2doc.values(): raise DocsError(f'{p}: two notebooks render to {doc}.html')
        nb2doc[name], procd[name] = doc, nb
    root_doc = nb2doc.get('index.ipynb', 'index')
    if root_doc != 'index': raise DocsError('index.ipynb must render to index.html')

    # module shown on each page (default_exp), from _modidx: page of each symbol
    page_module = {}
    for mod, syms in modidx['syms'].items():
        for k, (url, _) in syms.items():
            page_module.setdefault(url.split('#')[0][:-5], mod)
    anchor2sym = {url: k for mod, syms in modidx['syms'].items() for k, (url, _) in syms.items()}

    if SRC.exists(): shutil.rmtree(SRC)
    SRC.mkdir(parents=True)
    for name in nb2doc:                       # the module each page exports (`#| default_exp`) wins
        m = default_exp(NBS/name)
        if m: page_module[nb2doc[name]] = f"{settings().get('lib_path', 'minillm')}.{m}"
    api = ApiEntries(modidx, page_module)
    def plan_constants():
        api.constants = {nb2doc[n]: constants_plan(NBS/n, page_module.get(nb2doc[n]), exported) for n in nb2doc}
    ctx = dict(warnings=[], dropped_reprs=[], api=api, links=None)
    # pass 1 finds which symbols get an API entry, so links can point at them
    plan_constants()
    for name in nb2doc:
        c1 = dict(ctx, warnings=[], dropped_reprs=[], links=lambda md: md)
        translate_nb(procd[name], name, nb2doc[name], c1)
    documented = {e['full'] for es in api.by_page.values() for e in es if e['full']}
    api.seen, api.by_page = set(), {}
    ctx['links'] = Links(site_prefixes(cfg), nb2doc, anchor2sym, documented)
    plan_constants()
    pages = []
    for caption, nbs in groups:
        for p in nbs:
            name = Path(p).name
            doc = nb2doc[name]
            out, facts = translate_nb(procd[name], name, doc, ctx)
            if doc == root_doc:
                out['cells'].append(dict(cell_type='markdown', metadata={}, id='toctree', source=toctree_md(groups, nb2doc, root_doc)))
            words = sorted((w for w in re.findall(r'[A-Za-z]{5,}', facts['title']) if w.lower() not in SEARCH_STOPWORDS), key=len, reverse=True)
            facts['search_term'] = words[0].lower() if words else None
            (SRC/f'{doc}.ipynb').write_text(json.dumps(out, indent=1))
            facts['section'] = caption
            facts['api'] = api.by_page.get(doc, [])
            # hidden-cell text from the *source* notebook: lines that appear nowhere visible
            facts['hidden'] = hidden_lines(NBS/p, facts['hidden'])
            pages.append(facts)
    # other files nbdev copied (images, data used by markdown) travel with the pages
    for f in PROC.rglob('*'):
        if f.is_file() and f.suffix not in ('.ipynb', '.yml', '.css') and not any(x.startswith('.') for x in f.relative_to(PROC).parts):
            d = SRC/f.relative_to(PROC); d.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, d)
    for w in ctx['warnings']: log('WARNING:', w)
    for w in ctx['dropped_reprs']: log('dropped a widget/figure repr:', w)

    # every exported symbol must have an API entry on the site
    entries = {e['full'] for es in api.by_page.values() for e in es if e['full']}
    missing_api = []
    expected = {}
    for mod, names in exported.items():
        for n in names:
            full = f'{mod}.{n}'
            url = modidx['syms'].get(mod, {}).get(full, (None,))[0]
            if full not in entries: missing_api.append(full)
            else: expected[full] = url
    if missing_api:
        raise DocsError('exported symbols without an API entry (show_doc) on the site: ' + ', '.join(missing_api) +
                        ' (is their notebook in nbs/sidebar.yml, and is the library exported?)')

    log(f'translated {len(pages)} notebooks in {time.time()-t0:.1f}s; running sphinx')
    t1 = time.time()
    html = BUILD/'html'                      # myst-nb writes next to the output folder, so build inside _build
    for d in (SITE, html, BUILD/'doctrees', BUILD/'jupyter_execute'):
        if d.exists(): shutil.rmtree(d)
    cmd = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html', '-c', str(CONF_DIR),
           '-d', str(BUILD/'doctrees'), str(SRC), str(html)]
    env = dict(os.environ, MINILLM_ROOT=str(ROOT))
    r = subprocess.run(cmd, cwd=ROOT, env=env)
    if r.returncode: raise DocsError(f'sphinx-build failed (exit {r.returncode}); warnings are errors (-W)')
    (html/'.buildinfo').unlink(missing_ok=True)
    shutil.move(str(html), str(SITE))
    log(f'sphinx built _site in {time.time()-t1:.1f}s')
    MANIFEST.write_text(json.dumps(dict(pages=pages, exported=expected, root=root_doc,
                                        prefixes=site_prefixes(cfg)), indent=1))
    log(f'done in {time.time()-t0:.1f}s: {len(pages)} pages, {len(expected)} exported symbols with API entries')

def default_exp(nb_path):
    nb = json.loads(Path(nb_path).read_text())
    for c in nb['cells']:
        if c['cell_type'] == 'code':
            m = re.search(r'^\s*#\|\s*default_exp\s+(\S+)', src_text(c['source']), re.M)
            if m: return m.group(1)
    return None

def hidden_lines(nb_path, hidden_bodies):
    "Lines of hidden cells (source notebook) that appear nowhere the reader should see them."
    nb = json.loads(Path(nb_path).read_text())
    visible, hidden = [], list(hidden_bodies)
    for c in nb['cells']:
        s = src_text(c.get('source'))
        opts, body = parse_opts(s) if c['cell_type'] == 'code' else ({}, s)
        directives = set(opts)
        is_hidden = c['cell_type'] == 'code' and ({'hide', 'include'} & directives or opts.get('echo', '') == 'false'
                                                  or {'export', 'exporti'} & directives)
        if c['cell_type'] == 'code' and ('hide' in directives or opts.get('include') == 'false'): hidden.append(body)
        elif not is_hidden or 'exports' in directives: visible.append(s)
        for o in c.get('outputs', []):
            visible.append(src_text(o.get('text', '')) + src_text(o.get('data', {}).get('text/plain', '')))
    vis = '\n'.join(visible)
    res = []
    for b in hidden:
        for l in b.splitlines():
            l = l.strip()
            if len(l) >= 16 and not l.startswith('#') and l not in vis: res.append(l)
    return sorted(set(res))

if __name__ == '__main__':
    try: build(skip_proc='--skip-proc' in sys.argv)
    except DocsError as e:
        print(f'docs-build: ERROR: {e}', file=sys.stderr)
        sys.exit(1)
