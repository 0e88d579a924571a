#!/usr/bin/env python
"""Execute notebooks in place and save their outputs, as the docs show them.

Usage: python tools/run_nb.py nbs/03_sampling.ipynb [more.ipynb] [--skip "slow gpu"] [--only slow] [--cells ID,ID]
                              [--only-cells ID,ID] [--pause-others] [--timeout 1800] [--tidy]

Cells flagged with a word in --skip (default: `slow gpu`, the benchmark and GPU cells) are not run and keep their
saved outputs; --only runs the unflagged cells plus cells with these flags; --cells reruns just the named cell ids
after running everything else that is unflagged (so their inputs exist), and saves only their outputs; --only-cells runs just the named cells, after the
notebook's definitions (`#| export`/`#| exporti` cells, and the `#| hide` set-up cells before the first ordinary code cell), and keeps every other cell's saved
outputs: the way to rerun a few benchmark cells without the minutes of tests around them. Runs in a real Jupyter kernel
(nbclient). Stops at the first error and leaves the notebook unchanged. Run `nbdev_clean` afterwards.

Timings are only worth saving from a quiet machine. `--pause-others` stops (SIGSTOP) every other python, node, chromium and
jupyter process of this machine that is not part of this run while it runs (those started meanwhile within a second), and
resumes them (SIGCONT) when it ends, however it ends (SIGTERM from `timeout` or `kill` included; not SIGKILL); it prints the load average before the first cell. A light job that must
keep running meanwhile (an editor script, not a benchmark) can set MINILLM_NO_PAUSE=1 in its environment.

Hangs: every run has a per-cell time limit (--timeout, seconds); a cell that exceeds it stops the run with its index, id
and first line named. The kernel's replies are polled in one-second slices (`notebook_client`): a cell whose widget
updates go back to the kernel (an ipywidgets `Output` filled from a slider callback, such as the `FrameView` explorers of
03, 05, 10 and 11) could otherwise leave nbclient waiting forever for an execute reply the kernel had already sent, with
both processes idle (nbclient's `OutputWidget` sends on the shell socket while the reply poll waits on that same asyncio
socket; the wake-up is lost, jupyter/nbclient#312). The run prints how many replies were picked up only by a re-poll.

Saved notebooks are tidied for a reader who opens them in JupyterLab before running anything (`--tidy` does only
that, without running): a `python3` kernelspec (no "Select Kernel" dialog), no saved widget state (no stale models,
no leftover progress bars), progress-bar outputs dropped, and each widget view replaced by a view of no model whose
plain-text fallback is a one-line hint, so JupyterLab shows the hint or nothing, never a `VBox(children=...` repr.
"""
import argparse, os, re, sys, tempfile, time
from pathlib import Path

KERNELSPEC = {'display_name': 'python3', 'language': 'python', 'name': 'python3'}
WIDGET_VIEW = 'application/vnd.jupyter.widget-view+json'
WIDGET_HINT = 'Interactive widget: run this cell (after the cells above it) to use it; the figure below shows one of its views.'
_re_progress = re.compile(r'\d+%\||\|\s*\d+/\d+|it/s\]|s/it\]')

def _text(s): return ''.join(s) if isinstance(s, list) else (s or '')

def tidy(nb):
    "Make `nb` open cleanly in JupyterLab before it runs (see the module docstring); returns `nb`."
    nb.metadata['kernelspec'] = dict(KERNELSPEC)
    nb.metadata.pop('widgets', None)
    for c in nb.cells:
        if c.cell_type != 'code': continue
        outs = []
        for o in c.get('outputs', []):
            data = o.get('data', {})
            if WIDGET_VIEW in data:
                if _re_progress.search(_text(data.get('text/plain'))): continue      # a tqdm bar: nothing to see later
                o['data'] = {WIDGET_VIEW: {'model_id': '', 'version_major': 2, 'version_minor': 0}, 'text/plain': WIDGET_HINT}
            outs.append(o)
        c.outputs = outs
    return nb

def untidy(nb) -> list[str]:
    "What `tidy` would change in `nb`, one line each (empty when tidy)."
    probs = []
    if nb.metadata.get('kernelspec', {}).get('name') != 'python3': probs.append('no python3 kernelspec (JupyterLab asks to select a kernel)')
    if 'widgets' in nb.metadata: probs.append('saved widget state in the notebook metadata')
    for i, c in enumerate(nb.cells):
        for o in c.get('outputs', []):
            data = o.get('data', {})
            if WIDGET_VIEW in data and (data[WIDGET_VIEW].get('model_id') or _text(data.get('text/plain')) != WIDGET_HINT):
                probs.append(f"cell {i} ({c.get('id')}): a widget view of a saved model, shown as {_text(data.get('text/plain'))[:50]!r} before it runs")
    return probs

def cell_flags(src:str) -> set[str]:
    "Words of the `#| ...` directive lines at the top of a cell (`#| slow`, `#| hf`, `#| export` ...)."
    flags = set()
    for line in src.splitlines():
        s = line.strip()
        if not s: continue
        if not s.startswith('#|'): break
        flags.update(s[2:].replace(':', ' ').split())
    return flags

POLL_SLICE = 1.0                                                     # seconds between re-polls of the kernel's shell socket

def _sliced_get_msg(channel, stats:dict, slice_s:float=POLL_SLICE):
    "An async `channel.get_msg(timeout)` that polls in `slice_s` slices, so a missed wake-up costs a slice, not the whole timeout."
    from queue import Empty
    async def get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = slice_s if deadline is None else max(0.0, min(slice_s, deadline - time.monotonic()))
            t0 = time.monotonic()
            if await channel.socket.poll(int(wait * 1000)):
                if wait > 0 and time.monotonic() - t0 >= wait: stats['late'] += 1   # ready, but seen only when the slice ran out
                return await channel._recv()
            if deadline is not None and time.monotonic() >= deadline: raise Empty
    return get_msg

def notebook_client(nb, path:Path, timeout:int):
    """An nbclient `NotebookClient` for `nb` (run from `path`'s folder) with a `timeout` per cell, a shell poll in slices
    (see the module docstring), `.current` = (index, id, start time) of the cell running and `.poll_stats['late']`."""
    from nbclient import NotebookClient
    class Client(NotebookClient):
        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            kc.shell_channel.get_msg = _sliced_get_msg(kc.shell_channel, self.poll_stats)
            return kc
    def started(cell, cell_index, **kw): client.current, client.late_before = (cell_index, cell.get('id'), time.time()), client.poll_stats['late']
    def finished(cell, cell_index, **kw):
        if client.poll_stats['late'] > client.late_before: client.poll_stats['cells'].append(cell.get('id'))
    client = Client(nb, timeout=timeout, kernel_name='python3', resources={'metadata': {'path': str(path.parent)}},
                    on_cell_execute=started, on_cell_executed=finished)
    client.current, client.late_before, client.poll_stats = None, 0, {'late': 0, 'cells': []}
    return client

def late_note(client) -> str:
    "How many kernel replies only a re-poll found, and in which cells ('' when none)."
    st = client.poll_stats
    return f"{st['late']} kernel replies picked up by a re-poll (cells {', '.join(st['cells'])})" if st['late'] else ''

def where(client) -> str:
    "Which cell `client` was running, for an error message: index, id, first line and seconds."
    if client.current is None: return 'before the first cell'
    i, cid, t0 = client.current
    first = next((l for l in client.nb.cells[i].source.splitlines() if l.strip() and not l.startswith('#|')), '')
    return f"in cell {i} ({cid}: {first[:60]!r}) after {time.time() - t0:.0f} s"

HEAVY = ('python', 'node', 'chromium', 'chrome', 'jupyter')

class paused_others:
    "Within `with paused_others():`, every other heavy process (python, node, chromium, jupyter) of this machine is stopped (SIGSTOP), those started meanwhile too."
    def __enter__(self):
        import atexit, signal, threading
        self.stopped, self.done = {}, threading.Event()
        # `timeout` and `kill` send SIGTERM, which by default ends Python without running atexit: everyone would stay stopped
        self._old_term = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        self._scan()
        atexit.register(self.resume)
        print(f"paused {len(self.stopped)} other processes", flush=True)
        self.thread = threading.Thread(target=self._watch, daemon=True); self.thread.start()
        return self
    def _scan(self):
        import psutil, signal
        me = psutil.Process()
        mine = {me.pid} | {p.pid for p in me.parents()} | {p.pid for p in me.children(recursive=True)}
        for p in psutil.process_iter(['pid', 'name', 'cmdline']):
            try:
                if p.pid in mine or p.pid in self.stopped: continue
                what = (p.info['name'] or '') + ' ' + ' '.join((p.info['cmdline'] or [])[:2])
                if not any(h in what for h in HEAVY): continue
                if p.environ().get('MINILLM_NO_PAUSE') == '1': continue   # a light job that asked to be left running
                p.send_signal(signal.SIGSTOP); self.stopped[p.pid] = p
            except (psutil.NoSuchProcess, psutil.AccessDenied): pass
    def _watch(self):
        while not self.done.wait(1.0): self._scan()              # processes started meanwhile are paused within a second
    def resume(self):
        import psutil, signal
        self.done.set()
        for p in self.stopped.values():
            try: p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess: pass
        print(f"resumed {len(self.stopped)} processes", flush=True)
        self.stopped = {}
    def __exit__(self, *exc):
        import signal
        self.done.set(); self.thread.join(); self.resume()
        signal.signal(signal.SIGTERM, self._old_term)

def run(path:Path, skip:set[str], cells:set[str]|None=None, timeout:int=1800, only_cells:set[str]|None=None):
    "Run `path` in a real Jupyter kernel (widgets and progress bars render as in JupyterLab), skipping flagged cells."
    import nbformat
    nb = nbformat.read(path, as_version=4)
    stash = {}
    if only_cells is not None:
        unknown = only_cells - {c.get('id') for c in nb.cells}
        if unknown: print(f"FAIL  {path}: no cells with ids {sorted(unknown)}"); return False
    setup = True                                                     # hidden set-up cells come before the first ordinary code cell
    for i, c in enumerate(nb.cells):
        if c.cell_type != 'code': continue
        f = cell_flags(c.source)
        if not f & {'export', 'exporti', 'hide', 'default_exp'}: setup = False
        run_it = not (f & skip) and 'nbdev_export(' not in c.source
        if cells is not None and c.get('id') in cells: run_it = True
        if only_cells is not None:
            definitions = bool(f & {'export', 'exporti'}) or (setup and 'hide' in f and not f & {'slow', 'gpu', 'hf'})
            run_it = c.get('id') in only_cells or definitions
            if run_it and c.get('id') not in only_cells: stash[i] = (c.source, c.outputs)   # runs, but keeps its saved outputs
        if not run_it: stash[i] = (c.source, c.outputs); c.source = ''   # kept as saved
    env_in_test = os.environ.pop('IN_TEST', None)
    t0 = time.time()
    client = notebook_client(nb, path, timeout)
    try: client.execute()
    except Exception as e:
        print(f"{type(e).__name__} {where(client)}: {str(e)[-3000:]}", file=sys.stderr)
        for i, (src, outs) in stash.items(): nb.cells[i].source, nb.cells[i].outputs = src, outs
        partial = Path(tempfile.gettempdir())/(path.stem + '.failed.ipynb')  # what ran, for inspection (outside nbs/)
        nbformat.write(nb, partial)
        print(f"FAIL  {path} (not saved; the cells that ran are in {partial})"); return False
    finally:
        if env_in_test is not None: os.environ['IN_TEST'] = env_in_test
    for i, (src, outs) in stash.items(): nb.cells[i].source, nb.cells[i].outputs = src, outs
    keep = only_cells if only_cells is not None else cells
    if keep is not None:                                             # the rest of the notebook is exactly as it was on disk
        disk = nbformat.read(path, as_version=4)
        for c in disk.cells:
            if c.get('id') in keep: c.outputs = next(d.outputs for d in nb.cells if d.get('id') == c.get('id'))
        nb = disk
    nbformat.write(tidy(nb), path)
    note = late_note(client)
    print(f"ran   {path} in {time.time() - t0:.0f} s" + (f" ({note})" if note else '')); return True

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('paths', nargs='+')
    ap.add_argument('--skip', default='slow gpu')
    ap.add_argument('--only', default=None, help='flags to run in addition to unflagged cells (others are skipped)')
    ap.add_argument('--cells', default=None, help='comma-separated cell ids to rerun (even if flagged), after the unflagged cells they need; only their outputs are saved')
    ap.add_argument('--only-cells', default=None, help='comma-separated cell ids: run only these (after the definitions), keep all else')
    ap.add_argument('--pause-others', action='store_true', help='SIGSTOP other heavy processes while running (for timings)')
    ap.add_argument('--timeout', type=int, default=1800, help='seconds one cell may run before the run stops and names it')
    ap.add_argument('--tidy', action='store_true', help='only tidy the notebooks for JupyterLab, without running them')
    a = ap.parse_args()
    if a.tidy:
        import nbformat
        for p in a.paths:
            nb = nbformat.read(p, as_version=4)
            if untidy(nb): nbformat.write(tidy(nb), p); print(f"tidied {p}")
        sys.exit(0)
    skip = set(a.skip.split())
    if a.only is not None: skip -= set(a.only.split())
    cells = set(a.cells.split(',')) if a.cells else None
    only = set(a.only_cells.split(',')) if a.only_cells else None
    import contextlib
    with (paused_others() if a.pause_others else contextlib.nullcontext()):
        print(f"load average: {os.getloadavg()[0]:.2f}", flush=True)
        ok = all([run(Path(p).absolute(), skip, cells, a.timeout, only_cells=only) for p in a.paths])
    sys.exit(0 if ok else 1)
