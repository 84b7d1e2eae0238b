"""Parallel stories (issue 24): several stories at once, each in its own git worktree on its
own branch; the lanes' planning and their worktrees. Imported only by ``commands`` and
``plugin``."""
