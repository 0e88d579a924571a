#!/usr/bin/env python
"""Open every page of `_site/` in headless Chromium and check what a reader sees.

Serves `_site` on 127.0.0.1 and drives Debian's chromium through Python Playwright. For every page
in the sidebar: it loads with no console errors and no failed (or outside) requests; chapters have
their title, their figures load, their equations render; no `#|`, `:::`, hidden-cell text or widget
repr leaks; every exported symbol has its API entry; internal links resolve. Search finds a term
from each chapter. A screenshot of each page goes to `screenshots/`.
Prints `docs: N pages checked, M failed` and exits non-zero on any failure.
"""
from __future__ import annotations
import functools, html.parser, http.server, json, os, re, shutil, sys, threading, time, urllib.parse, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT/'_site'
SHOTS = ROOT/'screenshots'
MANIFEST = ROOT/'_build'/'docs_manifest.json'
CHROMIUM = os.environ.get('CHROMIUM', '/usr/bin/chromium')
ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync']
LEAKS = [(re.compile(r'#\|'), 'a `#|` cell option'), (re.compile(r'(^|\n)\s*:::'), 'a `:::` fence'),
         (re.compile(r'\b(VBox|HBox|interactive|IntSlider|FloatSlider|Dropdown|Output)\((children|value|description|layout|options|outputs)='),
          'a raw widget repr'),
         (re.compile(r'<Figure size [\d.]+x[\d.]+ with \d+ Axes>'), 'a raw figure repr'),
         (re.compile(r'Loading widget\.\.\.|Error displaying widget|Widget Javascript not detected'), 'a dead widget'),
         (re.compile(r'\{#[\w.-]+\}'), 'a Quarto anchor'), (re.compile(r'(^|\n)---\n'), 'a show_doc rule')]

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

def serve(root):
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_address[1]}/'

class Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.ids = set()
    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ('id', 'name') and v: self.ids.add(v)

@functools.lru_cache(None)
def page_ids(base, path):
    "ids in the HTML at `path` (None when it does not load)."
    try:
        with urllib.request.urlopen(base + path.lstrip('/'), timeout=10) as r:
            if r.status != 200: return None
            text = r.read().decode('utf-8', 'replace')
    except Exception: return None
    p = Ids(); p.feed(text)
    return frozenset(p.ids)

_QUOTES = str.maketrans({'\u2018': "'", '\u2019': "'", '\u201c': '"', '\u201d': '"'})   # Sphinx's smart quotes
def norm(s): return re.sub(r'\s+', ' ', (s or '').translate(_QUOTES)).strip()

def check_page(page, base, facts, exported, prefixes, failures):
    doc = facts['doc']
    url = base + f'{doc}.html'
    errs = []
    console, bad_requests = [], []
    page.on('console', lambda m: console.append(f'console {m.type}: {m.text}') if m.type == 'error' else None)
    page.on('pageerror', lambda e: console.append(f'page error: {e}'))
    page.on('requestfailed', lambda r: bad_requests.append(f'request failed: {r.url} ({r.failure})'))
    page.on('response', lambda r: bad_requests.append(f'HTTP {r.status}: {r.url}') if r.status >= 400 else None)
    resp = page.goto(url, wait_until='load')
    if resp is None or resp.status != 200: errs.append(f'page did not load ({resp.status if resp else "no response"})')
    page.wait_for_load_state('networkidle')
    if facts['math']:
        try:
            page.wait_for_function('() => window.MathJax && MathJax.startup && MathJax.startup.promise', timeout=15000)
            page.evaluate('() => MathJax.startup.promise')
        except Exception as e: errs.append(f'MathJax did not start: {e}')
    main = page.locator('article.bd-article, main').first
    text = main.inner_text()
    # title
    h1 = norm(page.locator('article h1, main h1').first.text_content() or '').rstrip('#¶ ').strip()
    if norm(facts['title']) not in h1: errs.append(f'title {facts["title"]!r} not the page heading (found {h1!r})')
    # figures
    imgs = page.evaluate('''() => Array.from(document.querySelectorAll('article img, main img'))
        .map(i => ({src: i.currentSrc || i.src, w: i.naturalWidth, done: i.complete}))''')
    broken = [i['src'][-60:] for i in imgs if not i['done'] or i['w'] == 0]
    if broken: errs.append(f'{len(broken)} figure(s) did not load: {broken[:3]}')
    if len(imgs) < facts['images']: errs.append(f'{facts["images"]} figure(s) expected, {len(imgs)} on the page')
    # equations
    if facts['math']:
        m = page.evaluate('''() => ({math: document.querySelectorAll('.math').length,
            done: document.querySelectorAll('.math mjx-container').length,
            err: document.querySelectorAll('mjx-merror, .MathJax_Error, mjx-container [style*="color: red"]').length})''')
        if m['math'] == 0: errs.append('the chapter has maths but the page has no equations')
        elif m['done'] < m['math']: errs.append(f'{m["math"] - m["done"]} of {m["math"]} equations did not render')
        if m['err']: errs.append(f'{m["err"]} equation(s) render as MathJax errors')
    # leaks
    for rx, what in LEAKS:
        mm = rx.search(text)
        if mm: errs.append(f'{what} leaks into the page: {text[max(0, mm.start()-40):mm.end()+40]!r}')
    for line in facts['hidden']:
        if line in text: errs.append(f'hidden-cell text leaks into the page: {line[:80]!r}')
    if page.locator('.jupyter-widgets, .widget-area, script[type="application/vnd.jupyter.widget-view+json"]').count():
        errs.append('a widget control (needs a kernel) is on the page')
    # API entries
    for full, where in exported.items():
        if where != doc: continue
        ok = page.evaluate('''(id) => { const e = document.getElementById(id);
            return !!e && e.matches('dt.sig, dt') && e.closest('dl.py') !== null; }''', full)
        if not ok: errs.append(f'no API entry for {full}')
    for e in facts['api']:
        if e['anchor'] and not page.evaluate('(id) => !!document.getElementById(id)', e['anchor']):
            errs.append(f'nbdev anchor #{e["anchor"]} missing for {e["name"]}')
    # links
    hrefs = page.evaluate('''() => Array.from(document.querySelectorAll('a[href]')).map(a => [a.getAttribute('href'), a.href])''')
    seen = set()
    for raw, absu in hrefs:
        if any(raw.startswith(p) for p in prefixes):
            errs.append(f'link to the published site instead of a relative link: {raw}'); continue
        if not absu.startswith(base): continue
        u = urllib.parse.urlsplit(absu)
        key = (u.path, u.fragment)
        if key in seen: continue
        seen.add(key)
        ids = page_ids(base, u.path)
        if ids is None: errs.append(f'broken link: {raw}')
        elif u.fragment and urllib.parse.unquote(u.fragment) not in ids: errs.append(f'link to a missing anchor: {raw}')
    for w in facts.get('widgets', []):
        if not w['static_figure']:
            errs.append(f'the widget in {facts["source"]} (cell `{w["code"]}`) has no static figure of its view after it')
    # screenshot
    page.screenshot(path=str(SHOTS/f'{doc}.png'), full_page=True)
    errs += console + bad_requests
    if errs: failures[doc] = errs
    return errs

def check_sidebar(page, base, pages, failures):
    "The site's left navigation lists the sidebar.yml sections and pages in order."
    page.goto(base + 'index.html', wait_until='load')
    nav = page.evaluate('''() => Array.from(document.querySelectorAll('nav.bd-docs-nav a.reference, nav.bd-docs-nav p.caption'))
        .map(e => e.tagName === 'P' ? ['section', e.innerText.trim()] : ['page', e.getAttribute('href')])''')
    got = [(k, v.split('#')[0]) for k, v in nav if not (k == 'page' and v.startswith(('http://', 'https://')))]
    want, last = [], object()
    for f in pages:
        if f['doc'] == 'index': want.append(('page', 'index.html')); continue
        if f['section'] != last and f['section']: want.append(('section', f['section']))
        last = f['section']
        want.append(('page', f'{f["doc"]}.html'))
    norm_got = [(k, v if k == 'section' else v.lstrip('./') or 'index.html') for k, v in got]
    norm_want = [(k, v) for k, v in want]
    if [x for x in norm_got if x[0] == 'page' and x[1] != '#'] and norm_got != norm_want:
        # the home page links to itself as '#' in some themes
        norm_got = [(k, 'index.html' if (k == 'page' and v in ('#', '')) else v) for k, v in norm_got]
    if norm_got != norm_want:
        failures['sidebar'] = [f'site navigation {norm_got} does not match nbs/sidebar.yml {norm_want}']

def check_search(page, base, pages, failures):
    "Type a term from each chapter into the search box and see that chapter among the results."
    errs = []
    for f in pages:
        if f['doc'] == 'index': continue
        term = f.get('search_term')
        if not term: continue
        page.goto(base + 'index.html', wait_until='load')
        box = page.locator('input[name="q"]:visible').first
        if not box.count():
            btn = page.locator('button.search-button, .search-button-field').first
            if btn.count(): btn.click()
            box = page.locator('input[name="q"]:visible').first
        if not box.count(): errs.append('no search box on the home page'); break
        box.fill(term)
        box.press('Enter')
        page.wait_for_url(re.compile(r'search\.html'), timeout=10000)
        try:
            page.wait_for_selector(f'#search-results li a[href*="{f["doc"]}.html"]', timeout=15000)
        except Exception:
            got = page.locator('#search-results').inner_text() if page.locator('#search-results').count() else ''
            errs.append(f'searching {term!r} does not find {f["doc"]}.html ({norm(got)[:120]!r})')
    if errs: failures['search'] = errs

def main():
    if not MANIFEST.exists() or not SITE.exists():
        print('docs-check: ERROR: no built site; run tools/docs', file=sys.stderr); return 1
    if not Path(CHROMIUM).exists():
        print(f'docs-check: ERROR: no chromium at {CHROMIUM} (apt-get install -y chromium, or set CHROMIUM=path)', file=sys.stderr)
        return 1
    man = json.loads(MANIFEST.read_text())
    pages, prefixes = man['pages'], man['prefixes']
    exported = {full: url.split('.html')[0] if url else None for full, url in man['exported'].items()}
    # every exported symbol's page: from the entries the build made
    for f in pages:
        for e in f['api']:
            if e['full'] in exported and e['id']: exported[e['full']] = f['doc']
    if SHOTS.exists(): shutil.rmtree(SHOTS)
    SHOTS.mkdir()
    from playwright.sync_api import sync_playwright
    srv, base = serve(SITE)
    failures, t0 = {}, time.time()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            ctx = browser.new_context(viewport={'width': 1280, 'height': 900})
            outside = []
            def route(r):
                if r.request.url.startswith(base) or r.request.url.startswith(('data:', 'blob:')): r.continue_()
                else: outside.append(r.request.url); r.abort()
            ctx.route('**/*', route)
            for f in pages:
                page = ctx.new_page()
                try: errs = check_page(page, base, f, exported, prefixes, failures)
                except Exception as e:
                    errs = failures.setdefault(f['doc'], [])
                    errs.append(f'check crashed: {type(e).__name__}: {e}')
                print(f"docs-check: {f['doc']}.html {'ok' if not errs else 'FAILED'}", flush=True)
                for e in errs: print(f'  - {e}')
                page.close()
            # the site's other pages (index of names, search) load cleanly too
            for extra in sorted(set(p.name for p in SITE.glob('*.html')) - {f'{f["doc"]}.html' for f in pages}):
                page = ctx.new_page()
                errs = []
                page.on('console', lambda m: errs.append(f'console {m.type}: {m.text}') if m.type == 'error' else None)
                page.on('pageerror', lambda e: errs.append(f'page error: {e}'))
                page.on('requestfailed', lambda r: errs.append(f'request failed: {r.url}'))
                page.on('response', lambda r: errs.append(f'HTTP {r.status}: {r.url}') if r.status >= 400 else None)
                page.goto(base + extra, wait_until='load'); page.wait_for_load_state('networkidle')
                if errs: failures[extra] = errs
                print(f"docs-check: {extra} {'ok' if not errs else 'FAILED'}", flush=True)
                for e in errs: print(f'  - {e}')
                page.close()
            page = ctx.new_page()
            for name, fn in (('sidebar', check_sidebar), ('search', check_search)):
                try: fn(page, base, pages, failures)
                except Exception as e: failures.setdefault(name, []).append(f'check crashed: {type(e).__name__}: {e}')
                print(f"docs-check: {name} {'ok' if name not in failures else 'FAILED'}", flush=True)
                for e in failures.get(name, []): print(f'  - {e}')
            if outside: failures.setdefault('requests', []).append(f'requests outside the site: {sorted(set(outside))[:5]}')
            browser.close()
    finally:
        srv.shutdown()
    missing_api = [k for k, v in exported.items() if v is None]
    if missing_api: failures.setdefault('api', []).append(f'exported symbols with no page: {missing_api}')
    nfail = sum(1 for f in pages if f['doc'] in failures)
    other = [k for k in failures if k not in {f['doc'] for f in pages}]
    for k in other:
        if k not in ('sidebar', 'search') and not k.endswith('.html'): print(f'docs-check: {k} FAILED'); [print(f'  - {e}') for e in failures[k]]
    print(f'docs: {len(pages)} pages checked, {nfail} failed' + (f'; also failed: {", ".join(other)}' if other else '') +
          f' ({time.time()-t0:.0f}s; screenshots in screenshots/)')
    return 1 if failures else 0

if __name__ == '__main__':
    sys.exit(main())
