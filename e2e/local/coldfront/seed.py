"""Seed a fresh ColdFront database for the policy e2e test; runs in ColdFront's venv.

usage: seed.py SEED_JSON   (DJANGO_SETTINGS_MODULE and COLDFRONT_ENV set by the caller)

SEED_JSON: {"resource": <name>, "staff": <username>, "projects": [{"title", "pi",
"users": [...], "attributes": {<allocation attribute type>: <value>}}]}.
Creates ColdFront's defaults (its own initial_setup), the resource, the
attribute types slurmkube reads, one project with an Active allocation per
entry, and prints {"token": <DRF token of the staff user>} on stdout.
"""

import json
import sys

import django

django.setup()

from coldfront.core.allocation.models import (  # noqa: E402
    Allocation,
    AllocationAttribute,
    AllocationAttributeType,
    AllocationStatusChoice,
    AllocationUser,
    AllocationUserStatusChoice,
    AttributeType,
)
from coldfront.core.project.models import (  # noqa: E402
    Project,
    ProjectStatusChoice,
    ProjectUser,
    ProjectUserRoleChoice,
    ProjectUserStatusChoice,
)
from coldfront.core.resource.models import Resource, ResourceType  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

# The types slurmkube reads (plan/policy/coldfront.py); slurm_account_name and
# "Accelerator Usage (Hours)" are ColdFront's own defaults.
SLURMKUBE_TYPES = {
    "slurmkube_gpus": "Int",
    "slurmkube_fairshare_weight": "Int",
    "slurmkube_tier": "Text",
    "slurmkube_borrowing": "Yes/No",
    "slurmkube_namespaces": "Text",
    "slurmkube_period_start": "Text",
    "slurmkube_period_days": "Int",
}


def main(seed):
    for command in (
        "migrate",
        "import_field_of_science_data",
        "add_default_project_choices",
        "add_resource_defaults",
        "add_allocation_defaults",
    ):
        call_command(command, verbosity=0)
    for name, kind in SLURMKUBE_TYPES.items():
        AllocationAttributeType.objects.get_or_create(
            name=name, attribute_type=AttributeType.objects.get(name=kind), is_private=False
        )
    users = get_user_model().objects
    staff, _ = users.get_or_create(username=seed["staff"], defaults={"is_staff": True})
    resource, _ = Resource.objects.get_or_create(
        name=seed["resource"],
        defaults={
            "resource_type": ResourceType.objects.get(name="Cluster"),
            "description": "slurmkube fleet",
        },
    )
    active_project = ProjectStatusChoice.objects.get(name="Active")
    for entry in seed["projects"]:
        pi, _ = users.get_or_create(username=entry["pi"])
        project, _ = Project.objects.get_or_create(
            title=entry["title"],
            defaults={"pi": pi, "description": entry["title"], "status": active_project},
        )
        allocation = Allocation.objects.create(
            project=project, status=AllocationStatusChoice.objects.get(name="Active"), quantity=1
        )
        allocation.resources.add(resource)
        for username in entry["users"]:
            user, _ = users.get_or_create(username=username)
            role = "Manager" if user == pi else "User"
            ProjectUser.objects.get_or_create(
                project=project,
                user=user,
                defaults={
                    "role": ProjectUserRoleChoice.objects.get(name=role),
                    "status": ProjectUserStatusChoice.objects.get(name="Active"),
                },
            )
            AllocationUser.objects.get_or_create(
                allocation=allocation,
                user=user,
                defaults={"status": AllocationUserStatusChoice.objects.get(name="Active")},
            )
        for name, value in entry["attributes"].items():
            AllocationAttribute.objects.create(
                allocation=allocation,
                allocation_attribute_type=AllocationAttributeType.objects.get(name=name),
                value=str(value),
            )
    token, _ = Token.objects.get_or_create(user=staff)
    print(json.dumps({"token": token.key}))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        main(json.load(f))
