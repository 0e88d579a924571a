#!/usr/bin/env python
"""Run every notebook in nbs/ as a test (nbdev's test runner) and print `N passed, N failed`.

Usage: python tools/test.py [--flags "hf slow gpu"] [--path nbs/03_sampling.ipynb] [--n_workers 2] [--verbose]

Cells flagged with a tst_flag from settings.ini (slow, gpu, hf) are skipped unless named in --flags.
The README's test command runs `--flags hf`: the checks against Hugging Face transformers run; benchmarks
(slow) and GPU cells keep their saved outputs.

Output: one line per notebook (PASS or FAIL, seconds), then the totals. Every notebook runs in a process of its own
whose standard output and error (at the file-descriptor level, so C++ libraries and the interpreter's own shutdown
messages are caught too) go to a log file; a failed notebook's log, with its traceback, is printed after the table,
a passed notebook's log is deleted unseen (--verbose prints it anyway). What the log catches from passing notebooks is
noise a reader would take for a failure: torch's profiler prints `USDT: ... profiler_start` lines from C++, and
torch.compile's caches print `Exception ignored in: ... ExactWeakKeyDictionary ... KeyError` from their clean-up
when the interpreter exits.

Threads: with several notebooks running at once, each worker gets one torch (OpenMP) thread unless
OMP_NUM_THREADS is set. Two notebooks with two threads each on two cores make every OpenMP barrier wait
for a descheduled thread: measured on the CI machine's kind (2 cores), one decode loop ran at 3.6 tok/s
with 2 x 2 threads against 17.9 tok/s with 2 x 1 (and 18.2 alone), and the whole suite took 3921 s (591 s with one thread each).
The heaviest notebooks are started first so that the two workers finish together, and every notebook
runs in a fresh process, as it does for a reader: the methods one chapter patches onto a class must not
leak into the tests of the next (they did: 90_all failed after 09_fast had run in the same worker).

A passing test does not mean the saved outputs are current: `python tools/stale.py --all` reruns the book and lists the
cells whose fresh output differs from the saved one, and `python tools/stale.py --long` the longest code cells per chapter.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# notebooks by their test time, longest first (measured with 2 workers of 1 thread: 316 s for 09 down to 12 s for index; others follow by name)
HEAVY_FIRST = ['09_fast', '09b_kernels', '06_speculative', '07_batching', '07b_engine', '12a_tensor_parallel', '12_parallel', '06a_draft_training', '05d_schema_grammar', '05c_json_schema', '05e_tool_calls', '02_loop', '05_beam', '08a_http', '91_cli', '05a_constrained', '05b_grammars', '11_long_context', '10_test_time', '03_sampling', '08_serving', '01_weights', '04_kvcache', 'index']

def run_one(fn:str, skip:str, force:str, basepath:str, result:str):
    "In a child process: test one notebook with nbdev's `test_nb` and write (passed, seconds) as JSON to `result`."
    from nbdev.test import test_nb
    ok, t = test_nb(Path(fn), skip_flags=skip.split(), force_flags=force.split(), basepath=basepath, do_print=False)
    Path(result).write_text(json.dumps([bool(ok), t]))
    sys.stdout.flush(); sys.stderr.flush()

def test_in_child(fn:Path, skip:str, force:str, basepath:str, logdir:Path) -> tuple[bool, float, Path]:
    "Test notebook `fn` in a fresh process with its output in a log file; (passed, seconds, log path)."
    log, result = logdir / f"{fn.stem}.log", logdir / f"{fn.stem}.json"
    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('minillm_test_runner', sys.argv[1]); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); m.run_one(*sys.argv[2:])")
    t0 = time.time()
    with open(log, 'wb') as f:
        p = subprocess.run([sys.executable, '-c', code, str(Path(__file__).absolute()), str(fn), skip, force, basepath, str(result)],
                           stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=fn.parent)
    if result.exists(): ok, t = json.loads(result.read_text())
    else:                                                               # the process died before it could report
        ok, t = False, time.time() - t0
        with open(log, 'a') as f: f.write(f"\n[the test process ended with status {p.returncode} before the notebook finished]\n")
    return ok, t, log

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--flags', default='hf', help='space-separated test flags to run that are skipped by default')
    ap.add_argument('--path', default=None, help='a notebook or glob (default: all of nbs/)')
    ap.add_argument('--n_workers', type=int, default=None)
    ap.add_argument('--verbose', action='store_true', help="also print the captured output of notebooks that passed")
    a = ap.parse_args()
    from nbdev.config import get_config
    from nbdev.doclinks import nbglob
    cfg = get_config()
    files = sorted(f.absolute() for f in nbglob(a.path, as_path=True) if not f.name.startswith('_'))
    if not files: print('no notebooks found'); print('0 passed, 0 failed'); sys.exit(1)
    skip, force = cfg.tst_flags, a.flags
    n = a.n_workers if a.n_workers is not None else min(os.cpu_count() or 1, 2)
    n = max(1, min(n, len(files)))
    if n > 1:
        threads = max(1, (os.cpu_count() or 1) // n)
        for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'): os.environ.setdefault(var, str(threads))   # inherited by the workers
        print(f"{len(files)} notebooks, {n} at a time, {os.environ['OMP_NUM_THREADS']} torch thread(s) each", flush=True)
    files.sort(key=lambda f: HEAVY_FIRST.index(f.stem) if f.stem in HEAVY_FIRST else len(HEAVY_FIRST))   # stable: the rest by name
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix='minillm-test-') as d, ThreadPoolExecutor(n) as ex:
        def one(f):
            ok, t, log = test_in_child(f, skip, force, str(cfg.config_path), Path(d))
            print(f"{'PASS' if ok else 'FAIL'}  {f.name:28} {t:6.1f} s", flush=True)
            return ok, t, log.read_text(errors='replace')
        res = list(ex.map(one, files))
    failed = [(f, log) for f, (ok, _, log) in zip(files, res) if not ok]
    for f, (ok, _, log) in zip(files, res):
        if (not ok or a.verbose) and log.strip():
            print(f"\n{'=' * 20} {f.name}: {'FAILED, its output' if not ok else 'output'} {'=' * 20}\n{log.rstrip()}")
    print(f"total {time.time() - t0:.0f} s")
    print(f"{len(files) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
