"""A catalog query's parameters bound as literals. (The session binds a DP query's parameters
with `session.bind_parameters`: two binders of one concept, to be unified.)"""

from __future__ import annotations

from typing import Any

from sqlglot import exp


def _bind(tree: exp.Expression, params: list[Any]) -> exp.Expression:
    """Parameters become literals first, so later rewrites (casts) see values."""
    from ...session import to_literal

    position = iter(range(len(params)))

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
            i = int(node.this.this) - 1
            return to_literal(params[i] if 0 <= i < len(params) else None)
        if isinstance(node, exp.Placeholder):
            i = next(position, -1)
            return to_literal(params[i] if 0 <= i < len(params) else None)
        return node

    return tree.transform(visit)
