"""Reporting: the only layer that imports matplotlib.

Figures take ``ax=`` and return the figure; documents (HTML, Markdown) and terminal
tables are built from analysis results. May import ``analysis`` and below.
"""
