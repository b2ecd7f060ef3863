"""The studies: each one's definition (what it trains, its claims, its report page).

``research/registry.py`` finds them by name, once ``experiments/__init__.py`` has registered this
package; the machinery they run on is the ``research`` package.
"""
