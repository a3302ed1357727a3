"""Pure renderers: desired state -> Slurm configuration files.

`plan_config` validates and decides (`config.py`); `render_files` lays the
result out through jinja2 templates that accept only validated tokens
(`templating.py`). No I/O here: callers write the files.
"""

from slurmkube.render.config import SlurmConfig, plan_config
from slurmkube.render.context import RenderContext
from slurmkube.render.files import RenderedConfig, render_files

__all__ = ["RenderContext", "RenderedConfig", "SlurmConfig", "plan_config", "render_files"]
