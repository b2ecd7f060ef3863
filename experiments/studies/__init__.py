"""The studies: each one's definition (what it trains, its claims, its report page).

``research/registry.py`` finds them by name; the machinery they run on is the ``research``
package.
"""
