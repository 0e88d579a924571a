#!/usr/bin/env python
"""Run every notebook in nbs/ as a test (nbdev's test runner) and print `N passed, N failed`.

Usage: python tools/test.py [--flags "hf slow gpu"] [--path nbs/03_sampling.ipynb] [--n_workers 2]

Cells flagged with a tst_flag from settings.ini (slow, gpu, hf) are skipped unless named in --flags.
The README's test command runs `--flags hf`: the checks against Hugging Face transformers run; benchmarks
(slow) and GPU cells keep their saved outputs.
"""
import argparse, os, sys, time
from pathlib import Path

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--flags', default='hf', help='space-separated test flags to run that are skipped by default')
    ap.add_argument('--path', default=None, help='a notebook or glob (default: all of nbs/)')
    ap.add_argument('--n_workers', type=int, default=None)
    a = ap.parse_args()
    from nbdev.config import get_config
    from nbdev.test import test_nb
    from nbdev.doclinks import nbglob
    from fastcore.parallel import parallel
    from fastcore.xtras import working_directory
    cfg = get_config()
    files = sorted(f.absolute() for f in nbglob(a.path, as_path=True) if not f.name.startswith('_'))
    if not files: print('no notebooks found'); print('0 passed, 0 failed'); sys.exit(1)
    skip, force = cfg.tst_flags.split(), a.flags.split()
    n = a.n_workers if a.n_workers is not None else min(os.cpu_count() or 1, 2)
    t0 = time.time()
    with working_directory(cfg.nbs_path):
        res = parallel(test_nb, files, skip_flags=skip, force_flags=force, n_workers=n if len(files) > 1 else 0,
                       basepath=cfg.config_path, pause=0.5, do_print=False)
    passed = [f for f, (ok, _) in zip(files, res) if ok]
    failed = [f for f, (ok, _) in zip(files, res) if not ok]
    for f, (ok, t) in zip(files, res): print(f"{'PASS' if ok else 'FAIL'}  {f.name:28} {t:6.1f} s")
    print(f"total {time.time() - t0:.0f} s")
    print(f"{len(passed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
