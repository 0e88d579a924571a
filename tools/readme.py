#!/usr/bin/env python
"""Write README.md from nbs/index.ipynb (the home page), without Quarto.

Markdown cells are copied, code cells become ```python blocks followed by their saved text output.
Cells whose source starts with `#| hide` are left out. Run after re-executing index.ipynb.
"""
import json, re
from pathlib import Path

root = Path(__file__).resolve().parent.parent
nb = json.loads((root / 'nbs' / 'index.ipynb').read_text())
out = []
for c in nb['cells']:
    src = ''.join(c['source'])
    if re.match(r'#\|\s*hide', src): continue
    if c['cell_type'] == 'markdown':
        # the summary line `> ...` right after the title is shown as a quote, as Quarto does
        out.append(src.strip())
    elif c['cell_type'] == 'code':
        code = '\n'.join(l for l in src.splitlines() if not l.startswith('#|')).strip()
        if code: out.append(f"```python\n{code}\n```")
        texts = []
        for o in c.get('outputs', []):
            if o.get('output_type') == 'stream' and o.get('name') == 'stdout': texts.append(''.join(o['text']))
            elif o.get('output_type') in ('execute_result',) and 'text/plain' in o.get('data', {}): texts.append(''.join(o['data']['text/plain']) + '\n')
        t = ''.join(texts).rstrip()
        if t: out.append(f"```\n{t}\n```")
text = '\n\n'.join(out) + '\n'
text = re.sub(r'\]\((\w+\.ipynb)\)', r'](nbs/\1)', text)   # chapter links point into nbs/ from the repository root
(root / 'README.md').write_text(text)
print(f"README.md written ({len(out)} blocks)")
