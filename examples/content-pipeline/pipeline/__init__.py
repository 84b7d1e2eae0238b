"""A content-marketing pipeline over one SQLite database (the pytest-ralph example).

The stages (research briefs, ideas, the plan, drafts, critiques, publishing, social posts,
the newsletter and the metrics report) are written story by story by the Ralph loop's
agent; see ``prd.json`` and ``README.md``.
"""
