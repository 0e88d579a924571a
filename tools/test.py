#!/usr/bin/env python
"""Run every notebook in nbs/ as a test (nbdev's test runner) and print `N passed, N failed`.

Usage: python tools/test.py [--flags "hf slow gpu"] [--path nbs/03_sampling.ipynb] [--n_workers 2]

Cells flagged with a tst_flag from settings.ini (slow, gpu, hf) are skipped unless named in --flags.
The README's test command runs `--flags hf`: the checks against Hugging Face transformers run; benchmarks
(slow) and GPU cells keep their saved outputs.

Threads: with several notebooks running at once, each worker gets one torch (OpenMP) thread unless
OMP_NUM_THREADS is set. Two notebooks with two threads each on two cores make every OpenMP barrier wait
for a descheduled thread: measured on the CI machine's kind (2 cores), one decode loop ran at 3.6 tok/s
with 2 x 2 threads against 17.9 tok/s with 2 x 1 (and 18.2 alone), and the whole suite took 3921 s (591 s with one thread each).
The heaviest notebooks are started first so that the two workers finish together, and every notebook
runs in a fresh process, as it does for a reader: the methods one chapter patches onto a class must not
leak into the tests of the next (they did: 90_all failed after 09_fast had run in the same worker).
"""
import argparse, multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

# notebooks by their test time, longest first (measured with 2 workers of 1 thread: 316 s for 09 down to 12 s for index; others follow by name)
HEAVY_FIRST = ['09_fast', '06_speculative', '07_batching', '02_loop', '05_beam', '08_serving', '91_cli', '03_sampling', '01_weights', '04_kvcache', 'index']

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--flags', default='hf', help='space-separated test flags to run that are skipped by default')
    ap.add_argument('--path', default=None, help='a notebook or glob (default: all of nbs/)')
    ap.add_argument('--n_workers', type=int, default=None)
    a = ap.parse_args()
    from nbdev.config import get_config
    from nbdev.test import test_nb
    from nbdev.doclinks import nbglob
    from fastcore.xtras import working_directory
    cfg = get_config()
    files = sorted(f.absolute() for f in nbglob(a.path, as_path=True) if not f.name.startswith('_'))
    if not files: print('no notebooks found'); print('0 passed, 0 failed'); sys.exit(1)
    skip, force = cfg.tst_flags.split(), a.flags.split()
    n = a.n_workers if a.n_workers is not None else min(os.cpu_count() or 1, 2)
    if n > 1 and len(files) > 1:
        threads = max(1, (os.cpu_count() or 1) // n)
        for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'): os.environ.setdefault(var, str(threads))   # inherited by the workers
        print(f"{len(files)} notebooks, {n} at a time, {os.environ['OMP_NUM_THREADS']} torch thread(s) each", flush=True)
    files.sort(key=lambda f: HEAVY_FIRST.index(f.stem) if f.stem in HEAVY_FIRST else len(HEAVY_FIRST))   # stable: the rest by name
    t0 = time.time()
    run = partial(test_nb, skip_flags=skip, force_flags=force, basepath=cfg.config_path, do_print=False)
    with working_directory(cfg.nbs_path):
        if len(files) == 1: res = [run(files[0])]
        else:   # a fresh process per notebook: a notebook's @patch-ed methods must not leak into the next one's tests
            with ProcessPoolExecutor(max(n, 1), mp_context=multiprocessing.get_context('spawn'), max_tasks_per_child=1) as ex:
                res = list(ex.map(run, files))
    passed = [f for f, (ok, _) in zip(files, res) if ok]
    failed = [f for f, (ok, _) in zip(files, res) if not ok]
    for f, (ok, t) in sorted(zip(files, res)): print(f"{'PASS' if ok else 'FAIL'}  {f.name:28} {t:6.1f} s")
    print(f"total {time.time() - t0:.0f} s")
    print(f"{len(passed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
