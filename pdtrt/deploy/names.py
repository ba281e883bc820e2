"""What the Kubernetes objects of one deployment are called, and the labels that tie them.

Every object name derives from one *base name*: the spec's ``name`` made a DNS-1035 label
(``_`` and ``.`` become ``-``), or ``--name``. The front's Service is the base name itself (what
clients dial); everything of a pod role is ``<base>-<role>``. Kubernetes refuses a Service
name that does not start with a letter or is longer than 63 characters, so the base name is
checked once, here, with the arithmetic in the message.

Pods carry the ``app.kubernetes.io`` recommended labels; selectors use the three that never
change over a deployment's life (name, instance, component), so a new pdtrt version rolls pods
instead of orphaning them. Prometheus sees ``instance`` and ``component`` as the target labels
``app_kubernetes_io_instance`` / ``app_kubernetes_io_component`` (the PodMonitor copies them):
dashboards and autoscalers select by those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from pdtrt.enums import Phase
from pdtrt.errors import DeployError
from pdtrt.version import __version__

__all__ = ["DNS_LABEL", "LABEL_COMPONENT", "LABEL_INSTANCE", "PROM_COMPONENT", "PROM_INSTANCE",
           "Names", "PodRole", "names_for"]

# RFC 1035 label, as Kubernetes checks Service names (IsDNS1035Label).
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_MAX = 63

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_VERSION = "app.kubernetes.io/version"
# The same two labels on Prometheus series (PodMonitor podTargetLabels, names sanitised).
PROM_INSTANCE = "app_kubernetes_io_instance"
PROM_COMPONENT = "app_kubernetes_io_component"


class PodRole(StrEnum):
    """What a pod does: the front (ensemble, pre/postprocessing, router) or one pool."""

    FRONT = "front"
    PREFILL = "prefill"
    DECODE = "decode"

    @property
    def phase(self) -> Phase | None:
        return None if self is PodRole.FRONT else Phase(self.value)

    @classmethod
    def of(cls, phase: Phase) -> PodRole:
        return cls(phase.value)


@dataclass(frozen=True, kw_only=True)
class Names:
    """Object names and labels of one deployment (``base`` is a checked DNS-1035 label)."""

    base: str

    def workload(self, role: PodRole) -> str:
        return f"{self.base}-{role}"

    def service(self, role: PodRole) -> str:
        """The front's Service is the base name (clients dial it); a pool's is ``<base>-<pool>``."""
        return self.base if role is PodRole.FRONT else f"{self.base}-{role}"

    @property
    def specs_configmap(self) -> str:
        return f"{self.base}-specs"

    @property
    def api_key_secret(self) -> str:
        """The Secret the user may create with the OpenAI front's API key (not generated)."""
        return f"{self.base}-openai-api-key"

    @property
    def dashboard_configmap(self) -> str:
        return f"{self.base}-grafana-dashboard"

    def selector(self, role: PodRole | None = None) -> dict[str, str]:
        """Labels that select the pods of ``role`` (all of the deployment's pods when None)."""
        out = {LABEL_NAME: "pdtrt", LABEL_INSTANCE: self.base}
        if role is not None:
            out[LABEL_COMPONENT] = str(role)
        return out

    def labels(self, role: PodRole | None = None) -> dict[str, str]:
        """Labels of an object (and of pods): the selector plus who manages it."""
        return {**self.selector(role), LABEL_MANAGED_BY: "pdtrt", LABEL_VERSION: __version__}


def names_for(spec_name: str, override: str | None = None) -> Names:
    """The :class:`Names` of a deployment; raises :class:`DeployError` for a base name
    Kubernetes would refuse (``override`` is ``--name``)."""
    base = override if override is not None else re.sub(r"[._]", "-", spec_name)
    longest = max(len(f"-{role}") for role in PodRole)
    where = "--name" if override is not None else f"the spec's name {spec_name!r}"
    if not DNS_LABEL.match(base):
        raise DeployError(
            f"{where} gives the Kubernetes base name {base!r}, which is not a DNS-1035 label "
            "(lowercase letters, digits and '-', starting with a letter, ending with a letter "
            "or digit)", hint="pass --name with such a name, e.g. --name llama-pd")
    if len(base) + longest > DNS_LABEL_MAX:
        raise DeployError(
            f"{where} gives the base name {base!r} ({len(base)} characters); its longest object "
            f"name adds {longest} ({base}-{PodRole.PREFILL}) and Kubernetes allows "
            f"{DNS_LABEL_MAX}: {len(base)} + {longest} > {DNS_LABEL_MAX}",
            hint=f"pass --name with at most {DNS_LABEL_MAX - longest} characters")
    return Names(base=base)
