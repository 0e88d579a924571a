#!/usr/bin/env python
"""Find stale saved outputs and over-long code cells in the book's notebooks.

Usage:
  python tools/stale.py nbs/02_loop.ipynb [more.ipynb ...] [--skip "slow gpu"] [--only slow] [--diff-lines 6] [--timeout 1800]
  python tools/stale.py --long [paths ...] [--top 3] [--max-lines 60]
  python tools/stale.py --all            # every chapter in nbs/ (the rerun takes as long as the test suite)

Stale outputs: each notebook is executed afresh in a real Jupyter kernel (nbclient, from `nbs/`, like
tools/run_nb.py) on a copy; the notebook file is never changed. Cells flagged with a word in --skip (default: `slow gpu`,
the benchmarks and GPU cells) are not run and are listed as kept. For every cell that ran, its fresh text output (stdout,
results' text/plain, errors; PNG/HTML only by presence) is compared with the saved one, and the cells that differ are
listed with the start of a diff and a `tools/run_nb.py --cells` command that reruns exactly them (after the cells they need).

Each cell may run --timeout seconds of wall-clock time (default 1800, which counts the minutes a quiet run of someone else's
`--pause-others` keeps it stopped); one that runs longer stops the rerun, which names it (index, id, first line). Kernel replies are polled in slices, as in tools/run_nb.py (whose docstring says why: widget cells could leave the
rerun waiting forever on an idle kernel).

Timing and sampling cells are compared only in shape, because their numbers change from run to run:
  - a cell is a *timing* cell if it carries `#| timing` (or `#| slow`, when --only slow runs it), or its source times
    something (`perf_counter`, `time.time()`, `timeit`, `machine_info()`, `tokens_per_second`) or its output prints rates
    or durations (`12.3 ms`, `4.5 tok/s`, `prefill 55 ms`); its shape is the text with every number replaced by `#`;
  - a cell is a *sampling* cell if it carries `#| sampling`: random draws without a fixed seed, whose text changes; its
    shape is the number of output lines and the kinds of output.
Seeded sampling is reproducible and is compared exactly; so is every other cell.

Over-long cells: `--long` prints, per notebook, the `--top` longest code cells (lines of source, `#|` lines included) and
every code cell over `--max-lines`, with ids, so the book can keep its cells short. It runs nothing.

Exit status: 1 if any cell is stale (or a notebook failed to run), else 0; with --long, 1 if a cell is over --max-lines.
"""
import argparse, difflib, json, os, re, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_nb import cell_flags, _text, notebook_client, where, late_note                     # the same directive parser and text joiner as run_nb

ROOT = Path(__file__).resolve().parent.parent
_re_num = re.compile(r'[-+]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?')
_re_rate = re.compile(r'\d\s*(?:ms|µs|us|ns|s|sec|seconds|tok/s|tokens/s|it/s|s/it)\b')
_re_timing_src = re.compile(r'perf_counter|time\.time\(|timeit|machine_info\(\)|tokens_per_second|process_time')
_re_addr = re.compile(r'0x[0-9a-fA-F]{6,}')
_re_tmp = re.compile(r'/tmp/[\w./-]+')
_re_progress = re.compile(r'\d+%\||\|\s*\d+/\d+|it/s\]|s/it\]')

def output_text(outputs) -> str:
    "What a reader sees of a cell's outputs, as text: streams, text/plain of results, errors; images and HTML by name."
    parts = []
    for o in outputs:
        t = o.get('output_type')
        if t == 'stream':
            text = _text(o.get('text'))
            if o.get('name') == 'stderr':                                # warnings and progress bars: not the book's text
                text = '\n'.join(l for l in text.splitlines() if not _re_progress.search(l) and 'Warning' not in l
                                 and not l.startswith(('[W', 'W0', 'I0')))
            parts.append(text)
        elif t in ('execute_result', 'display_data'):
            d = o.get('data', {})
            if 'image/png' in d or 'image/svg+xml' in d: parts.append('[figure]\n')
            elif 'text/html' in d and 'text/plain' not in d: parts.append('[html]\n')
            elif 'application/vnd.jupyter.widget-view+json' in d:
                if not _re_progress.search(_text(d.get('text/plain'))): parts.append('[widget]\n')   # progress bars: not the book's
            else: parts.append(_text(d.get('text/plain')) + '\n')
        elif t == 'error': parts.append(f"{o.get('ename')}: {o.get('evalue')}\n")
    text = ''.join(parts)
    text = _re_addr.sub('0x…', _re_tmp.sub('/tmp/…', text))
    return '\n'.join(l.rstrip() for l in text.splitlines() if l.strip()).strip()

def cell_kind(src:str, saved:str, flags:set[str]) -> str:
    "'timing', 'sampling' or 'exact': how a cell's fresh output is compared with its saved one."
    if 'sampling' in flags: return 'sampling'
    if 'timing' in flags or 'slow' in flags or _re_timing_src.search(src) or _re_rate.search(saved): return 'timing'
    return 'exact'

def shape(text:str, kind:str) -> str:
    if kind == 'timing': return _re_num.sub('#', text)
    if kind == 'sampling':
        kinds = sorted(set(re.findall(r'^\[(figure|html|widget)\]$', text, re.M)))
        return f"{len(text.splitlines())} lines {kinds}"
    return text

def execute(path:Path, skip:set[str], timeout:int=1800) -> tuple[list|None, str]:
    "Run a copy of notebook `path` (flagged cells blanked, `timeout` s per cell); its cells with fresh outputs (or None) and a note."
    import nbformat
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == 'code' and (cell_flags(c.source) & skip or 'nbdev_export(' in c.source): c.source = ''
    env_in_test = os.environ.pop('IN_TEST', None)
    client = notebook_client(nb, path, timeout)
    try: client.execute()
    except Exception as e: return None, f"{type(e).__name__} {where(client)}: {str(e)[-1500:]}"
    finally:
        if env_in_test is not None: os.environ['IN_TEST'] = env_in_test
    note = late_note(client)
    return nb.cells, f"; {note}" if note else ''

def stale_report(path:Path, skip:set[str], diff_lines:int=6, timeout:int=1800) -> tuple[int, str]:
    "Rerun `path` (`timeout` s per cell) and compare; (number of stale cells, report text)."
    saved = json.loads(path.read_text())['cells']
    t0 = time.time()
    fresh, err = execute(path, skip, timeout)
    rel = _rel(path)
    if fresh is None: return 1, f"FAIL  {rel}: the notebook did not run through ({err})"
    lines, stale, kept, by_kind = [], [], [], {'exact': 0, 'timing': 0, 'sampling': 0}
    for i, (s, f) in enumerate(zip(saved, fresh)):
        if s['cell_type'] != 'code': continue
        src = _text(s['source']); flags = cell_flags(src)
        if not src.strip() or 'nbdev_export(' in src: continue
        old = output_text(s.get('outputs', []))
        if flags & skip: kept.append(s.get('id')); continue
        if {'output', 'false'} <= flags: continue                      # `#| output: false`: the docs show no output
        new = output_text(f.get('outputs', []))
        kind = cell_kind(src, old + '\n' + new, flags)
        by_kind[kind] += 1
        if shape(old, kind) == shape(new, kind): continue
        stale.append(s.get('id'))
        what = 'no saved output' if not old else 'no output now' if not new else f'{kind} output differs' + (' in shape' if kind != 'exact' else '')
        lines.append(f"  cell {i:3} {s.get('id')}: {what}")
        d = [l for l in difflib.unified_diff(old.splitlines(), new.splitlines(), 'saved', 'fresh', n=0, lineterm='')][2:]
        d = [l for l in d if not l.startswith('@@')]
        if len(d) == 2 and d[0][0] == '-' and d[1][0] == '+':         # one changed line: show where it changes
            k = next((j for j, (a, b) in enumerate(zip(d[0][1:], d[1][1:])) if a != b), min(len(d[0]), len(d[1])) - 1)
            d = [l[0] + ('…' if k > 60 else '') + l[1:][max(0, k - 60):k + 80] for l in d]
        for l in d[:diff_lines]: lines.append(f"      {l[:150]}")
        if len(d) > diff_lines: lines.append(f"      ... {len(d) - diff_lines} more diff lines")
    head = (f"{'STALE' if stale else 'OK   '} {rel}: {len(stale)} of {sum(by_kind.values())} cells that ran differ "
            f"(compared exactly {by_kind['exact']}, timing in shape {by_kind['timing']}, sampling in shape {by_kind['sampling']}); "
            f"{len(kept)} flagged cells kept as saved; ran in {time.time() - t0:.0f} s{err}")
    if stale: lines.append(f"  rerun them: PYTHONPATH=$PWD python tools/run_nb.py {rel} --cells {','.join(stale)} && nbdev_clean")
    return len(stale), '\n'.join([head] + lines)

def long_report(path:Path, top:int=3, max_lines:int=60) -> tuple[int, str]:
    "The `top` longest code cells of `path` and every cell over `max_lines`; (number over, report text)."
    cells = [(len(_text(c['source']).splitlines()), i, c.get('id')) for i, c in enumerate(json.loads(path.read_text())['cells'])
             if c['cell_type'] == 'code']
    cells.sort(reverse=True)
    over = [c for c in cells if c[0] > max_lines]
    show = cells[:max(top, len(over))]
    return len(over), (f"{_rel(path):32} {len(over)} over {max_lines}: " +
                       ', '.join(f"{cid} {n}{'!' if n > max_lines else ''}" for n, i, cid in show))

def _rel(path:Path) -> str:
    "`path` relative to the repository when inside it."
    try: return str(path.relative_to(ROOT))
    except ValueError: return str(path)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('paths', nargs='*')
    ap.add_argument('--all', action='store_true', help='every notebook in nbs/ (names not starting with _)')
    ap.add_argument('--long', action='store_true', help='report the longest code cells instead of rerunning')
    ap.add_argument('--top', type=int, default=3); ap.add_argument('--max-lines', type=int, default=60)
    ap.add_argument('--skip', default='slow gpu'); ap.add_argument('--only', default=None, help='flags to run although in --skip')
    ap.add_argument('--diff-lines', type=int, default=6)
    ap.add_argument('--timeout', type=int, default=1800, help='seconds one cell may run before the rerun stops and names it')
    a = ap.parse_args()
    paths = sorted((ROOT / 'nbs').glob('*.ipynb')) if a.all or not a.paths else [Path(p).absolute() for p in a.paths]
    paths = [p for p in paths if not p.name.startswith('_')]
    if a.long:
        reports = [long_report(p, a.top, a.max_lines) for p in paths]
        for _, r in reports: print(r)
        n = sum(k for k, _ in reports)
        print(f"{n} code cells over {a.max_lines} lines in {len(paths)} notebooks")
        sys.exit(1 if n else 0)
    skip = set(a.skip.split()) - set((a.only or '').split())
    total = 0
    for p in paths:
        n, r = stale_report(p, skip, a.diff_lines, a.timeout)
        print(r, flush=True); total += n
    print(f"{total} stale cells in {len(paths)} notebooks")
    sys.exit(1 if total else 0)

if __name__ == '__main__': main()
