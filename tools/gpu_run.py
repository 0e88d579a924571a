#!/usr/bin/env python
"""The book's GPU run: every cell flagged `gpu`, executed on a lent GPU machine in a few commands, its outputs put back into the notebooks.

The GPU machine runs commands in a copy of the working tree, reaches no package index, carries at most 64 MiB per command
and stays warm (keeping what the last command left behind) for about 30 s between commands. So the run is four steps:

  here:      python tools/gpu_run.py prepare          # .gpu/: the model file in two parts, the wheels the GPU machine lacks, a manifest
  device 1:  python3 tools/gpu_run.py stage           # carry .gpu/part-1 .gpu/whl .gpu/manifest.json: puts them aside in /tmp
  device 2:  python3 tools/gpu_run.py run --notebooks 06_speculative,07b_engine,06a_draft_training --out $OUT
                                                      # carry .gpu/part-2 (at once after 1): joins, checks the hash, runs the cells
  here:      python tools/gpu_run.py apply DIR        # DIR: the folder the device tool returns the files of $OUT in
  device 3:  python3 tools/gpu_run.py run --notebooks 09_fast --out $OUT   # at once; then apply again

(tools/README.md has the exact commands and carries.)

`run` executes the `gpu` cells of each notebook in NOTEBOOKS, in order, in a fresh process per notebook (a small kernel of its
own: no Jupyter is needed there), writes every cell's outputs as nbformat JSON to $OUT/<notebook>.json after each cell (so
that a run cut short still returns what it did) and all of them to $OUT/gpu_outputs.json after each notebook, and prints every cell's output again at the end, where the device tool's
reply shows it. `apply` copies those outputs into the cells with the same ids and runs `nbdev_clean`.

`dry-run` does all four steps on this machine, with the transfer to a temporary folder, the cells on the CPU
(`MINILLM_GPU_DEVICE=cpu`) and at small sizes (`MINILLM_GPU_QUICK=1`), and applies the outputs to copies of the notebooks;
it fails if a cell raises or gets no output. The notebooks are never changed by a dry run.
"""
import argparse, ast, base64, contextlib, hashlib, io, json, os, shutil, subprocess, sys, tempfile, time, traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ['06_speculative', '07b_engine', '09_fast', '06a_draft_training']   # in this order: the cheapest cells first
WHEELS = ['fastcore', 'gguf']              # what minillm imports that the GPU machine's image lacks (its torch, transformers, ... are used)
PARTS = 2
STASH = Path(os.environ.get('MINILLM_GPU_STASH', '/tmp/minillm-gpu'))   # where `stage` puts the first part aside on the GPU machine
BUDGET_S = 470                             # the run stops starting cells after this many seconds (a device command may run 600)
GRACE_S = 45                               # ... and stops a cell that runs this much past the budget

def say(*a): print(*a, flush=True)
def sha256(path:Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)
    return h.hexdigest()

# ---------------------------------------------------------------- here: prepare
def prepare(dest:Path, wheels:bool=True):
    "Split the embedded model file into `PARTS` parts under `dest` and fetch the wheels of `WHEELS` at the versions installed here."
    sys.path.insert(0, str(ROOT))
    from minillm.weights import default_gguf
    gguf = default_gguf()
    dest.mkdir(parents=True, exist_ok=True)
    data, n = gguf.read_bytes(), PARTS
    size = -(-len(data) // n)
    for i in range(n): (dest / f'part-{i + 1}').write_bytes(data[i * size:(i + 1) * size])
    man = dict(name=gguf.name, size=len(data), sha256=hashlib.sha256(data).hexdigest(), parts=n, wheels={})
    if wheels:
        from importlib.metadata import version
        (dest / 'whl').mkdir(exist_ok=True)
        for w in WHEELS:
            v = version(w); man['wheels'][w] = v
            if not list((dest / 'whl').glob(f"{w}-{v}-*.whl")):
                subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--only-binary=:all:', f'{w}=={v}', '-d', str(dest / 'whl')], check=True)
    (dest / 'manifest.json').write_text(json.dumps(man, indent=1))
    say(f"{dest}: {n} parts of {size / 2**20:.1f} MiB, wheels {man['wheels']}; sha256 {man['sha256'][:16]}...")
    return man

# ---------------------------------------------------------------- device, command 1: stage
def stage(src:Path, stash:Path):
    "Put the parts, wheels and manifest found in `src` aside in `stash`, where the next command finds them."
    stash.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.is_dir(): shutil.copytree(p, stash / p.name, dirs_exist_ok=True)
        else: shutil.copy2(p, stash / p.name)
    say(f"staged in {stash}: {sorted(p.name for p in stash.iterdir())}")

def _find(name:str, *dirs:Path) -> Path|None:
    return next((d / name for d in dirs if (d / name).exists()), None)

def assemble(src:Path, stash:Path, cache:Path) -> Path:
    "Join the parts (from `src` or `stash`) into the model cache, check the hash, and install the wheels into `stash/site`."
    man_p = _find('manifest.json', src, stash)
    if man_p is None: sys.exit(f"no manifest.json in {src} or {stash}: run `prepare` here and carry .gpu/manifest.json")
    man = json.loads(man_p.read_text())
    dest = cache / 'smollm2-135m-instruct' / man['name']
    if not (dest.exists() and sha256(dest) == man['sha256']):
        parts = [_find(f'part-{i + 1}', src, stash) for i in range(man['parts'])]
        if missing := [i + 1 for i, p in enumerate(parts) if p is None]:
            sys.exit(f"parts {missing} of the model are missing (looked in {src} and {stash}): the machine went back between the "
                     f"commands, or a part was not carried; run `stage` again with part 1, then `run` with part 2 at once")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, 'wb') as f:
            for p in parts: f.write(p.read_bytes())
        if (h := sha256(dest)) != man['sha256']:
            dest.unlink(); sys.exit(f"the joined model file's sha256 is {h}, the manifest says {man['sha256']}: a part is wrong")
    say(f"model file {dest.name}: {man['size']} bytes, sha256 checked")
    site = stash / 'site'
    whl = [p for d in (src / 'whl', stash / 'whl') if d.exists() for p in d.glob('*.whl')]
    if whl and not site.exists():
        names = {}
        for p in whl: names.setdefault(p.name.split('-')[0], p)                # one of each
        subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile', '--target', str(site),
                        *map(str, names.values())], check=True)
    return site

# ---------------------------------------------------------------- the cells: a small kernel
def gpu_cells(nb_path:Path) -> list[dict]:
    "The code cells of a notebook flagged `gpu`, in order."
    nb = json.loads(nb_path.read_text())
    out = []
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        src = ''.join(c['source'])
        flags = [l.strip()[2:].strip() for l in src.splitlines() if l.strip().startswith('#|')]
        if 'gpu' in ' '.join(flags).split(): out.append(dict(id=c['id'], source=src))
    return out

def _stream(name, text): return dict(name=name, output_type='stream', text=text)

def run_cell(src:str, ns:dict) -> list[dict]:
    "Execute one cell's source in namespace `ns` like Jupyter does (the last expression's value shown, figures saved) and return its outputs."
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    code = '\n'.join(l for l in src.splitlines() if not l.strip().startswith('#|'))
    outs, buf_o, buf_e = [], io.StringIO(), io.StringIO()
    class Tee(io.TextIOBase):
        def __init__(self, buf, real): self.buf, self.real = buf, real
        def write(self, s): self.buf.write(s); self.real.write(s); return len(s)
        def flush(self): self.real.flush()
    err, value = None, None
    try:
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(Tee(buf_o, sys.stdout)), contextlib.redirect_stderr(Tee(buf_e, sys.stderr)):
            exec(compile(tree, '<cell>', 'exec'), ns)
            if last is not None: value = eval(compile(ast.Expression(last.value), '<cell>', 'eval'), ns)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt): raise
        err = dict(output_type='error', ename=type(e).__name__, evalue=str(e), traceback=traceback.format_exc().splitlines())
        print(traceback.format_exc(), file=sys.stderr)
    if buf_o.getvalue(): outs.append(_stream('stdout', buf_o.getvalue()))
    if buf_e.getvalue(): outs.append(_stream('stderr', buf_e.getvalue()))
    for n in plt.get_fignums():
        b = io.BytesIO(); plt.figure(n).savefig(b, format='png', bbox_inches='tight')
        outs.append(dict(output_type='display_data', metadata={}, data={'image/png': base64.b64encode(b.getvalue()).decode(), 'text/plain': '<Figure>'}))
    plt.close('all')
    if value is not None and err is None:
        outs.append(dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/plain': repr(value)}))
    if err: outs.append(err)
    return outs

def run_notebook(nb:str, out_json:Path, deadline:float):
    "In a child process: run the `gpu` cells of nbs/`nb`.ipynb in one namespace, writing {cell id: outputs} to `out_json` after each."
    os.chdir(ROOT / 'nbs')                                        # where a notebook runs
    ns, res = {'__name__': '__main__'}, {}
    for c in gpu_cells(ROOT / 'nbs' / f'{nb}.ipynb'):
        if time.time() > deadline:
            res[c['id']] = [_stream('stderr', 'not run: the GPU run reached its time budget before this cell\n')]
            say(f"[{nb} {c['id']}] skipped: time budget reached")
        else:
            say(f"\n[{nb} {c['id']}] running"); t0 = time.time()
            res[c['id']] = run_cell(c['source'], ns)
            say(f"[{nb} {c['id']}] {time.time() - t0:.1f} s")
        out_json.write_text(json.dumps(res))

def run_all(out:Path, notebooks:list[str], budget:float=BUDGET_S) -> dict:
    "Run every notebook's `gpu` cells, each in its own process; write $OUT/gpu_outputs.json and gpu_log.txt; print the outputs last."
    out.mkdir(parents=True, exist_ok=True)
    deadline, allres = time.time() + budget, {}
    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('gpu_run', sys.argv[1]); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); m.run_notebook(sys.argv[2], m.Path(sys.argv[3]), float(sys.argv[4]))")
    for nb in notebooks:
        part = out / f'{nb}.json'
        t0 = time.time()
        # a process group of its own (not a new session: the device tool ends what a command leaves behind, unless it left the session),
        # so that a cell overrunning the budget is stopped with every process it started (inductor's compile workers)
        p = subprocess.Popen([sys.executable, '-c', code, __file__, nb, str(part), str(deadline)], cwd=ROOT, process_group=0)
        try: rc = p.wait(timeout=max(30, deadline - time.time() + GRACE_S))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9); p.wait(); rc = 'killed: a cell overran the time budget'
        allres[nb] = json.loads(part.read_text()) if part.exists() else {}
        say(f"== {nb}: {len(allres[nb])} cells in {time.time() - t0:.0f} s (exit {rc})")
        (out / 'gpu_outputs.json').write_text(json.dumps(allres))
    say("\n================ outputs of the gpu cells ================")
    for nb, cells in allres.items():
        for cid, outs in cells.items():
            say(f"--- {nb} {cid}")
            for o in outs:
                if o['output_type'] == 'stream' and o['name'] == 'stdout': say(o['text'].rstrip())
                elif o['output_type'] == 'error': say(f"ERROR {o['ename']}: {o['evalue']}")
                elif o['output_type'] == 'execute_result': say(o['data']['text/plain'])
    return allres

def problems(allres:dict, notebooks:list[str]) -> list[str]:
    "Cells that raised, got no output, or were not run."
    bad = []
    for nb in notebooks:
        want = [c['id'] for c in gpu_cells(ROOT / 'nbs' / f'{nb}.ipynb')]
        got = allres.get(nb, {})
        for cid in want:
            outs = got.get(cid)
            if not outs: bad.append(f"{nb} {cid}: no output")
            elif any(o['output_type'] == 'error' for o in outs): bad.append(f"{nb} {cid}: raised " + next(o['ename'] + ': ' + o['evalue'] for o in outs if o['output_type'] == 'error'))
            elif any(o.get('name') == 'stderr' and o['text'].startswith('not run') for o in outs): bad.append(f"{nb} {cid}: not run (time budget)")
    return bad

# ---------------------------------------------------------------- here: apply
def collect(d:Path) -> dict:
    "The outputs in folder `d`: gpu_outputs.json, updated by the per-notebook files `<notebook>.json`, written after every cell (a run cut short leaves only those)."
    allres = json.loads((d / 'gpu_outputs.json').read_text()) if (d / 'gpu_outputs.json').exists() else {}
    for f in sorted(d.glob('*.json')):
        if f.stem in NOTEBOOKS: allres[f.stem] = {**allres.get(f.stem, {}), **json.loads(f.read_text())}
    if not allres: sys.exit(f"no outputs in {d}: neither gpu_outputs.json nor a notebook's .json")
    return allres

def apply(allres:dict, nbs_dir:Path, clean:bool=True) -> int:
    "Put the outputs into the notebooks' cells with the same ids; returns the number of cells changed."
    n = 0
    for nb, cells in allres.items():
        path = nbs_dir / f'{nb}.ipynb'
        d = json.loads(path.read_text())
        for c in d['cells']:
            if c.get('id') in cells: c['outputs'] = cells[c['id']]; c['execution_count'] = None; n += 1
        path.write_text(json.dumps(d, indent=1, ensure_ascii=False) + '\n')
    if clean: subprocess.run(['nbdev_clean', '--fname', str(nbs_dir)], check=True, cwd=ROOT)
    say(f"outputs of {n} cells put into {len(allres)} notebooks")
    return n

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('step', choices=['prepare', 'stage', 'run', 'apply', 'dry-run'])
    ap.add_argument('dir', nargs='?', help="apply: the folder holding gpu_outputs.json")
    ap.add_argument('--out', default=os.environ.get('OUT', 'gpu_out'), help="run: where the outputs go ($OUT on the GPU machine)")
    ap.add_argument('--notebooks', default=','.join(NOTEBOOKS))
    ap.add_argument('--budget', type=float, default=None, help=f"run: seconds after which no new cell starts (default {BUDGET_S}; dry-run 2400)")
    a = ap.parse_args()
    nbs = a.notebooks.split(',')
    src = ROOT / '.gpu'
    if a.step == 'prepare': prepare(src)
    elif a.step == 'stage': stage(src, STASH)
    elif a.step == 'run':
        cache = STASH / 'cache'
        site = assemble(src, STASH, cache)
        env_add = dict(MINILLM_CACHE=str(cache), PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), MPLBACKEND='Agg', PYTHONUNBUFFERED='1')
        os.environ.update(env_add)
        import torch
        say(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}, device {os.environ.get('MINILLM_GPU_DEVICE', 'cuda')}")
        allres = run_all(Path(a.out), nbs, a.budget or BUDGET_S)
        bad = problems(allres, nbs)
        say(f"\n{sum(len(v) for v in allres.values()) - len(bad)} cells ran cleanly, {len(bad)} did not" + ''.join(f"\n  {b}" for b in bad))
    elif a.step == 'apply':
        if not a.dir: sys.exit("apply needs the folder that holds gpu_outputs.json")
        allres = collect(Path(a.dir))
        if bad := problems(allres, list(allres)): say("cells with problems (their outputs are applied all the same):\n  " + '\n  '.join(bad))
        apply(allres, ROOT / 'nbs')
    elif a.step == 'dry-run': sys.exit(dry_run(nbs, a.budget or 2400))

def dry_run(nbs:list[str], budget:float) -> int:
    "The whole sequence on this machine: transfer through a temporary folder, cells on the CPU at small sizes, outputs into copies."
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix='minillm-gpu-dry-') as tmp:
        tmp = Path(tmp); here, there, stash = tmp / 'here', tmp / 'there', tmp / 'stash'
        prepare(here)
        for i, names in enumerate([['part-1', 'whl', 'manifest.json'], ['part-2']]):    # the two commands' carries
            (there / f'call{i}').mkdir(parents=True)
            for n in names:
                (shutil.copytree if (here / n).is_dir() else shutil.copy2)(here / n, there / f'call{i}' / n)
        stage(there / 'call0', stash)
        site = assemble(there / 'call1', stash, stash / 'cache')
        assert (site / 'fastcore').exists() and (site / 'gguf').exists(), "the wheels were not installed"
        env = dict(os.environ, MINILLM_GPU_STASH=str(stash), MINILLM_CACHE=str(stash / 'cache'), MINILLM_GPU_DEVICE='cpu', MINILLM_GPU_QUICK='1', MPLBACKEND='Agg',
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
        r = subprocess.run([sys.executable, __file__, 'run', '--out', str(tmp / 'out'), '--notebooks', ','.join(nbs), '--budget', str(budget)],
                           env=env, cwd=ROOT)
        allres = collect(tmp / 'out')
        copies = tmp / 'nbs'; copies.mkdir()
        for nb in nbs: shutil.copy2(ROOT / 'nbs' / f'{nb}.ipynb', copies)
        n = apply(allres, copies, clean=False)
        bad = problems(allres, nbs)
        want = sum(len(gpu_cells(ROOT / 'nbs' / f'{nb}.ipynb')) for nb in nbs)
        say(f"dry run: {n} of {want} gpu cells got outputs, {len(bad)} with problems, {time.time() - t0:.0f} s")
        for b in bad: say(f"  {b}")
        return 1 if (bad or n != want or r.returncode) else 0

if __name__ == '__main__': main()
