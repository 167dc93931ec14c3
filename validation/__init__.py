"""Manifest validation and policy checks for the rendered GitOps tree (``apps/<env>/<app>/<kind>-<name>.yaml``).

API used by ``python -m validation validate`` (validation/repository.py)::

    from validation import EnvFacts, validate_manifests, check_policies

    report = validate_manifests("apps/dev", "1.34.0", schema_location=None)   # -> Report (None: the default;
                                                                              # "DIR1:DIR2" searched in order)
    print(report.render()); ok = report.ok
    violations = check_policies("apps/dev", EnvFacts.from_environment_file("environments/dev.yaml"),
                                environment_files=["environments/dev.yaml"])   # -> list[Violation]

CLI: ``python -m validation validate|lint|manifests|policy|fetch-schemas --help``.
"""

from .env_facts import EnvFacts
from .fetch_schemas import FetchError, fetch_schemas
from .kubeconform import KubeconformError
from .policy import RULES, Violation, check_documents, check_policies
from .report import Report, ResourceResult, SchemaIssue
from .schema_location import SCHEMA_LOCATION_ENV, MissingSchemasError, resolve_schema_locations
from .schema_validation import validate_manifests

__all__ = [
    "EnvFacts", "FetchError", "KubeconformError", "MissingSchemasError", "RULES", "Report", "ResourceResult",
    "SCHEMA_LOCATION_ENV", "SchemaIssue", "Violation", "check_documents", "check_policies", "fetch_schemas",
    "resolve_schema_locations", "validate_manifests",
]
