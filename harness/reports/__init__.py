"""Reports: result schema, store, baselines, the regression gate, CSV/HTML/Markdown.

Never imports torch (a test enforces it), so reports render on any machine.
"""
