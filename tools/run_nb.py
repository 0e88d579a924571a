#!/usr/bin/env python
"""Execute notebooks in place and save their outputs, as the docs show them.

Usage: python tools/run_nb.py nbs/03_sampling.ipynb [more.ipynb] [--skip "slow gpu"] [--only slow] [--cells ID,ID]

Cells flagged with a word in --skip (default: `slow gpu`, the benchmark and GPU cells) are not run and keep their
saved outputs; --only runs the unflagged cells plus cells with these flags; --cells reruns just the named cell ids
after running everything else that is unflagged (so their inputs exist). Runs in a real Jupyter kernel (nbclient). Stops at the
first error and leaves the notebook unchanged. Run `nbdev_clean` afterwards.
"""
import argparse, os, sys, tempfile, time
from pathlib import Path

def cell_flags(src:str) -> set[str]:
    "Words of the `#| ...` directive lines at the top of a cell (`#| slow`, `#| hf`, `#| export` ...)."
    flags = set()
    for line in src.splitlines():
        s = line.strip()
        if not s: continue
        if not s.startswith('#|'): break
        flags.update(s[2:].replace(':', ' ').split())
    return flags

def run(path:Path, skip:set[str], cells:set[str]|None=None, timeout:int=3600):
    "Run `path` in a real Jupyter kernel (widgets and progress bars render as in JupyterLab), skipping flagged cells."
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    stash = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type != 'code': continue
        f = cell_flags(c.source)
        run_it = not (f & skip) and 'nbdev_export(' not in c.source
        if cells is not None and c.get('id') in cells: run_it = True
        if not run_it: stash[i] = (c.source, c.outputs); c.source = ''   # kept as saved
    env_in_test = os.environ.pop('IN_TEST', None)
    t0 = time.time()
    client = NotebookClient(nb, timeout=timeout, kernel_name='python3', resources={'metadata': {'path': str(path.parent)}})
    try: client.execute()
    except Exception as e:
        print(f"{type(e).__name__}: {str(e)[-3000:]}", file=sys.stderr)
        for i, (src, outs) in stash.items(): nb.cells[i].source, nb.cells[i].outputs = src, outs
        partial = Path(tempfile.gettempdir())/(path.stem + '.failed.ipynb')  # what ran, for inspection (outside nbs/)
        nbformat.write(nb, partial)
        print(f"FAIL  {path} (not saved; the cells that ran are in {partial})"); return False
    finally:
        if env_in_test is not None: os.environ['IN_TEST'] = env_in_test
    for i, (src, outs) in stash.items(): nb.cells[i].source, nb.cells[i].outputs = src, outs
    nbformat.write(nb, path)
    print(f"ran   {path} in {time.time() - t0:.0f} s"); return True

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('paths', nargs='+')
    ap.add_argument('--skip', default='slow gpu')
    ap.add_argument('--only', default=None, help='flags to run in addition to unflagged cells (others are skipped)')
    ap.add_argument('--cells', default=None, help='comma-separated cell ids to run even if flagged')
    a = ap.parse_args()
    skip = set(a.skip.split())
    if a.only is not None: skip -= set(a.only.split())
    cells = set(a.cells.split(',')) if a.cells else None
    ok = all([run(Path(p).absolute(), skip, cells) for p in a.paths])
    sys.exit(0 if ok else 1)
