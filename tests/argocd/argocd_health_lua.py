"""Run Argo CD custom health checks (``health.lua``) the way Argo CD does, with a real Lua 5.1 runtime.

Layout (health-checks/), the same as Argo CD's own ``resource_customizations/`` tree::

    health-checks/<group>/<Kind>/health.lua
    health-checks/<group>/<Kind>/health_test.yaml   # tests: [{healthStatus: {status, message}, inputPath}]
    health-checks/<group>/<Kind>/testdata/*.yaml    # one resource per file

How Argo CD evaluates a script (util/lua/lua.go): a fresh gopher-lua (Lua 5.1) state per evaluation, the resource as
the global ``obj`` (JSON objects become tables, arrays 1-indexed tables, null becomes nil), the script's return value
must be a table whose ``status`` is one of Healthy, Progressing, Degraded, Suspended, Missing, Unknown (any other
value becomes Unknown with "Lua returned an invalid health status") and whose ``message`` is a string. For scripts
delivered through ``argocd-cm`` only the base, table, package and a safe os library are loaded unless
``resource.customizations.useOpenLibs.<group>_<kind>: "true"`` is set, so this runner removes string, math, io,
debug and coroutine (and the string metatable) to catch scripts that would only work with the open libraries.

Delivery into Argo CD: each ``health.lua`` becomes the value of the ``argocd-cm`` key
``resource.customizations.health.<group>_<Kind>`` (see :func:`config_map_key` and :func:`argocd_cm_health_data`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CUSTOMIZATIONS_ROOT = REPO_ROOT / "health-checks"

HEALTH_STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")
INVALID_HEALTH_STATUS_MESSAGE = "Lua returned an invalid health status"
CONFIG_MAP_KEY_PREFIX = "resource.customizations.health."

# Lua 5.1 like gopher-lua: lupa's bundled Lua 5.1 first, LuaJIT (5.1 language) as a fallback.
_LUA51_MODULES = ("lupa.lua51", "lupa.luajit21", "lupa.luajit20")

# Argo CD opens only these for argocd-cm scripts; everything else is removed from the runtime.
_SANDBOX_LUA = """
local safe_os = { clock = os.clock, date = os.date, difftime = os.difftime, time = os.time }
debug.setmetatable("", nil)
for _, name in ipairs({ "string", "math", "io", "debug", "coroutine", "bit", "bit32", "jit", "ffi", "utf8" }) do
  _G[name] = nil
  package.loaded[name] = nil
end
python = nil
package.loaded.python = nil
os = safe_os
package.loaded.os = safe_os
"""


_PYTHON_TO_LUA_TYPE = {type(None): "nil", str: "string", bool: "boolean", int: "number", float: "number"}


class HealthScriptError(Exception):
    """The script failed or returned something Argo CD would reject (Argo CD then shows an error, not a health)."""


@dataclasses.dataclass(frozen=True)
class HealthCheck:
    group: str
    kind: str
    directory: Path

    @property
    def script_path(self) -> Path:
        return self.directory / "health.lua"

    @property
    def test_path(self) -> Path:
        return self.directory / "health_test.yaml"

    @property
    def script(self) -> str:
        """The check as Argo CD receives it: the shared prelude, then health.lua (the generator's assembly)."""
        from generator.argocd import health_script

        return health_script(self.script_path)

    @property
    def config_map_key(self) -> str:
        return config_map_key(self.group, self.kind)

    @property
    def name(self) -> str:
        return f"{self.group}/{self.kind}"


@dataclasses.dataclass(frozen=True)
class HealthCase:
    check: HealthCheck
    input_path: str
    status: str
    message: str

    @property
    def fixture_path(self) -> Path:
        return self.check.directory / self.input_path

    @property
    def id(self) -> str:
        return f"{self.check.name}:{self.input_path}"


def config_map_key(group: str, kind: str) -> str:
    """The argocd-cm key Argo CD reads a custom health check from, e.g. resource.customizations.health.ray.io_RayJob.

    Core-group kinds (group "") use the kind alone: resource.customizations.health.Service.
    """
    return f"{CONFIG_MAP_KEY_PREFIX}{group}_{kind}" if group else f"{CONFIG_MAP_KEY_PREFIX}{kind}"


def discover_health_checks(root: Path = CUSTOMIZATIONS_ROOT) -> list[HealthCheck]:
    """Every <group>/<Kind>/ directory under root that has a health_test.yaml, sorted."""
    checks = []
    for test_file in sorted(Path(root).glob("*/*/health_test.yaml")):
        directory = test_file.parent
        checks.append(HealthCheck(group=directory.parent.name, kind=directory.name, directory=directory))
    return checks


def argocd_cm_health_data(root: Path = CUSTOMIZATIONS_ROOT) -> dict[str, str]:
    """argocd-cm ``data`` entries for all health checks under root: {config map key: Lua text}."""
    data = {}
    for check in discover_health_checks(root):
        if check.script_path.is_file():
            data[check.config_map_key] = check.script
    return data


def load_cases(check: HealthCheck) -> list[HealthCase]:
    """The cases of a health_test.yaml, in Argo CD's format (tests: - healthStatus: {status, message}, inputPath)."""
    document = load_yaml(check.test_path.read_text(encoding="utf-8")) or {}
    cases = []
    for entry in document.get("tests") or []:
        expected = entry.get("healthStatus") or {}
        cases.append(HealthCase(check=check, input_path=entry.get("inputPath", ""),
                                status=expected.get("status", ""), message=expected.get("message", "")))
    return cases


def load_resource(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return load_yaml(handle)


def _lua51_module():
    errors = []
    for name in _LUA51_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError as error:  # pragma: no cover - depends on the lupa build
            errors.append(f"{name}: {error}")
    raise RuntimeError("no Lua 5.1 runtime available from lupa (pip install lupa==2.8): " + "; ".join(errors))


def new_lua_runtime():
    """A fresh Lua 5.1 runtime with only what Argo CD gives argocd-cm health scripts."""
    module = _lua51_module()
    runtime = module.LuaRuntime(register_eval=False, register_builtins=False, unpack_returned_tuples=False)
    runtime.execute(_SANDBOX_LUA)
    return runtime


def lua_version(runtime) -> str:
    return runtime.eval("_VERSION")


def to_lua(runtime, value: Any):
    """Python (parsed YAML/JSON) to Lua the way Argo CD's decodeValue does: dicts and lists become tables
    (lists 1-indexed), None becomes nil, numbers, strings and booleans stay what they are."""
    if isinstance(value, dict):
        table = runtime.table()
        for key, item in value.items():
            if item is not None:
                table[str(key)] = to_lua(runtime, item)
        return table
    if isinstance(value, (list, tuple)):
        table = runtime.table()
        for index, item in enumerate(value, start=1):
            table[index] = to_lua(runtime, item)
        return table
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    # Timestamps and the like: Argo CD sees the JSON string.
    return str(value)


def run_health_lua(script: str, resource: dict[str, Any]) -> dict[str, str]:
    """Evaluate a health script against a resource; returns {"status": ..., "message": ...} as Argo CD would."""
    module = _lua51_module()
    runtime = new_lua_runtime()
    runtime.globals().obj = to_lua(runtime, resource)
    try:
        returned = runtime.execute(script)
    except module.LuaError as error:
        raise HealthScriptError(f"Lua error: {error}") from error
    if module.lua_type(returned) != "table":
        kind = module.lua_type(returned) or _PYTHON_TO_LUA_TYPE.get(type(returned), type(returned).__name__)
        raise HealthScriptError(f"expect table output from Lua script, not {kind}")
    status = returned["status"]
    message = returned["message"]
    for field, value in (("status", status), ("message", message)):
        if value is not None and not isinstance(value, str):
            raise HealthScriptError(f"health {field} must be a string, got {value!r}")
    status = status or ""
    message = message or ""
    if status not in HEALTH_STATUSES:
        return {"status": "Unknown", "message": INVALID_HEALTH_STATUS_MESSAGE}
    return {"status": status, "message": message}


def evaluate_case(case: HealthCase, script: str | None = None) -> dict[str, str]:
    """Run one health_test.yaml case (with the check's own script unless another is given)."""
    return run_health_lua(case.check.script if script is None else script, load_resource(case.fixture_path))


def assert_case(case: HealthCase, script: str | None = None) -> None:
    """Raise AssertionError unless the script yields exactly the case's expected status and message."""
    actual = evaluate_case(case, script)
    expected = {"status": case.status, "message": case.message}
    if actual != expected:
        raise AssertionError(f"{case.id}: expected {expected!r}, got {actual!r}")


def failing_cases(cases: Iterable[HealthCase], script: str | None = None) -> list[str]:
    """Run all cases, collect the mismatches (and script errors) instead of stopping at the first."""
    failures = []
    for case in cases:
        try:
            assert_case(case, script)
        except (AssertionError, HealthScriptError) as error:
            failures.append(str(error) if isinstance(error, AssertionError) else f"{case.id}: {error}")
    return failures
