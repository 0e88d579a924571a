#!/usr/bin/env python
"""Self-test of the docs translator on a fixture chapter that uses every Quarto-only construct.

Builds a throw-away nbdev project in a temporary folder (settings.ini and tools/ copied from this
repo, one fixture notebook plus a home page), runs `tools/docs_build.py` and `tools/docs_check.py`
there, and then looks at the HTML for the things the translation must get right. Run it after
changing tools/docs_build.py: `python tools/docs_selftest.py` (about 30 s).
"""
import base64, io, json, os, re, shutil, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def png_b64():
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2), dpi=50); ax.plot([0, 1, 0]); b = io.BytesIO(); fig.savefig(b, format='png'); plt.close(fig)
    return base64.b64encode(b.getvalue()).decode()

def md(s): return dict(cell_type='markdown', metadata={}, source=s)
def code(s, outputs=()): return dict(cell_type='code', metadata={}, source=s, outputs=list(outputs), execution_count=None)
def plain(t, kind='execute_result'):
    o = dict(output_type=kind, metadata={}, data={'text/plain': t})
    if kind == 'execute_result': o['execution_count'] = 1
    return o

def fixture_nb(png):
    return [
        md('# Fixture chapter\n\n> Every Quarto construct the translator must handle.'),
        code('#| default_exp fixture'),
        code('#| export\nLIMIT = 7  # the largest allowed value\n\ndef clamp(x:int, # the value to clamp\n          hi:int=LIMIT # the upper bound\n         )->int: # `x`, at most `hi`\n    "Clamp `x` to at most `hi`."\n    return min(x, hi)'),
        code('#| hide\nsecret_setup_value_for_hidden_cell = 12345'),
        md('## Callouts {#sec-callouts}\n\n::: {.callout-note}\nA plain note with $x^2$ inline maths.\n:::\n\n'
           '::: {.callout-tip collapse="true"}\n## A tip title\nTip body text.\n:::\n\n::: {.callout-warning title="Careful"}\nWarning body.\n:::\n\n'
           'Display maths:\n\n$$\\mathrm{clamp}(x) = \\min(x, h)$$\n\nSee [the callouts](#sec-callouts), `clamp` and [the model](00_model.ipynb).'),
        code('#| code-fold: true\nfolded_cell_result = clamp(3)\nfolded_cell_result', [plain('3')]),
        code('#| echo: false\nprint("only the output of an echo-false cell")', [dict(output_type='stream', name='stdout', text='only the output of an echo-false cell\n')]),
        code('#| exports\ndef shown_source(): "An exported function whose source is shown."; return 1'),
        md('## A widget\n\nThe widget below needs a kernel; the figure after it is the static view.'),
        code('w = interactive(lambda t: t, t=(0., 2.))\nw', [plain("interactive(children=(FloatSlider(value=1.0, description='t', max=2.0), Output()), _dom_classes=('widget-interact',))")]),
        code('#| fig-cap: "A static figure of the widget\'s default view."\nplot_it()',
             [dict(output_type='display_data', metadata={}, data={'image/png': png, 'text/plain': '<Figure size 150x100 with 1 Axes>'})]),
        code('fig_only_repr()', [plain('<Figure size 640x480 with 1 Axes>', 'display_data')]),
        code('#| output: asis\nprint("**asis markdown** from a cell")', [dict(output_type='stream', name='stdout', text='**asis markdown** from a cell\n')]),
    ]

def nb(cells):
    return dict(nbformat=4, nbformat_minor=5, metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}},
                cells=[dict(c, id=f'x{i}') for i, c in enumerate(cells)])

def main():
    tmp = Path(tempfile.mkdtemp(prefix='minillm-docs-selftest-'))
    try:
        shutil.copy(ROOT/'settings.ini', tmp)
        shutil.copytree(ROOT/'tools', tmp/'tools', ignore=shutil.ignore_patterns('__pycache__'))
        (tmp/'nbs').mkdir(); (tmp/'minillm').mkdir()
        (tmp/'minillm'/'__init__.py').write_text('__version__ = "0.0.0"\n')
        for f in ('_quarto.yml', 'styles.css'): shutil.copy(ROOT/'nbs'/f, tmp/'nbs')
        (tmp/'nbs'/'index.ipynb').write_text(json.dumps(nb([md('# minillm\n\n> Home page of the fixture site.'),
                                                                 md('Read [the fixture](01_fixture.ipynb).')])))
        (tmp/'nbs'/'00_model.ipynb').write_text(json.dumps(nb([md('# A model page\n\n> Linked from the fixture.'),
                                                                 code('#| default_exp model'), md('Text.')])))
        (tmp/'nbs'/'01_fixture.ipynb').write_text(json.dumps(nb(fixture_nb(png_b64()))))
        (tmp/'nbs'/'sidebar.yml').write_text('website:\n  sidebar:\n    contents:\n      - index.ipynb\n      - section: Tests\n'
                                             '        contents:\n          - 00_model.ipynb\n          - 01_fixture.ipynb\n')
        subprocess.run(['git', 'init', '-q'], cwd=tmp, check=True)
        subprocess.run([sys.executable, '-c', 'from nbdev.doclinks import nbdev_export; nbdev_export.__wrapped__()'], cwd=tmp, check=True)
        subprocess.run([sys.executable, 'tools/docs_build.py'], cwd=tmp, check=True)
        r = subprocess.run([sys.executable, 'tools/docs_check.py'], cwd=tmp)
        h = (tmp/'_site'/'fixture.html').read_text()
        text = re.sub(r'<[^>]+>', ' ', re.sub(r'<(script|style)\b.*?</\1>', '', h, flags=re.S))
        fails = []
        def want(cond, what):
            if not cond: fails.append(what)
        want('admonition note' in h, 'callout-note -> note admonition')
        want(re.search(r'class="[^"]*\btip\b[^"]*admonition', h) and 'A tip title' in h, 'callout-tip with heading title -> titled tip')
        want('Careful' in h and re.search(r'class="[^"]*\bwarning\b[^"]*admonition', h), 'callout title= attribute')
        want('id="sec-callouts"' in h and 'href="#sec-callouts"' in h, 'heading {#id} anchor and link')
        want('id="minillm.fixture.clamp"' in h and 'id="clamp"' in h and 'py function' in h, 'show_doc -> API entry with Sphinx and nbdev anchors')
        want('id="minillm.fixture.LIMIT"' in h, 'exported constant -> API entry')
        want('the value to clamp' in h, 'docments comments -> parameter table')
        want('secret_setup_value_for_hidden_cell' not in h, '#| hide cell removed')
        want('only the output of an echo-false cell' in h and 'print(&quot;only' not in h and 'print("only' not in h, 'echo: false')
        want('toggle-details' in h or '<details' in h, 'code-fold: true -> folded input')
        want('interactive(children' not in text and 'FloatSlider(' not in text, 'widget repr dropped')
        want('Figure size' not in text, 'figure repr dropped')
        want('static figure of the widget' in h and '<figcaption' in h, 'fig-cap -> figure caption')
        want('<strong>asis markdown</strong>' in h, 'output: asis stream -> markdown')
        want('model.html' in h, 'link to another notebook')
        want('#|' not in text and ':::' not in text, 'no #| or ::: in the page')
        man = json.loads((tmp/'_build'/'docs_manifest.json').read_text())
        fx = next(p for p in man['pages'] if p['doc'] == 'fixture')
        want([w['static_figure'] for w in fx['widgets']] == [True], f'widget followed by its static figure is recorded ({fx["widgets"]})')
        want(r.returncode == 0, 'tools/docs_check.py passes on the fixture site')
        for f in fails: print('selftest FAILED:', f)
        print(f'docs selftest: {18 - len(fails)} of 18 ok')
        return 1 if fails else 0
    finally:
        if os.environ.get('KEEP'): print('kept', tmp)
        else: shutil.rmtree(tmp, ignore_errors=True)

if __name__ == '__main__':
    sys.exit(main())
