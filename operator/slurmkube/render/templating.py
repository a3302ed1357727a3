"""The one jinja2 environment every Slurm file is rendered through.

`finalize` runs on every `{{ value }}` the templates print and lets through
only `SlurmToken`s (values a grammar validator accepted), ints and bools. A
plain string that skipped validation fails the render instead of reaching a
Slurm file, so the "nothing can inject a line" rule holds by construction,
not by reviewing templates.
"""

from __future__ import annotations

from typing import Any

import jinja2

from slurmkube.api.grammar import SlurmToken


class UnvalidatedValue(TypeError):
    """A template tried to print a value that no validator accepted (a bug, not bad input)."""


def _only_validated(value: Any) -> Any:
    if isinstance(value, SlurmToken | bool | int):
        return value
    raise UnvalidatedValue(f"refusing to render unvalidated {type(value).__name__}: {value!r}")


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("slurmkube.render", "templates"),
    autoescape=False,  # Slurm files, not HTML; safety comes from `finalize`.
    finalize=_only_validated,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render_template(name: str, **context: Any) -> str:
    return ENV.get_template(name).render(**context)
