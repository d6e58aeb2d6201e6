"""Small modules and objects (issues 29 and 45): no file under shared/ over
500 lines, and no class over 250 lines or 30 methods counted with
everything it inherits from the project (its MRO: a class assembled from
mixins is one object, and is measured as one), so a person reads one in a
sitting. An exception must be justified here, in `ALLOWED`."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from pathlib import Path

import shared

SHARED = Path(__file__).resolve().parents[3] / "shared"
MAX_FILE_LINES = 500
MAX_CLASS_LINES = 250
MAX_CLASS_METHODS = 30
# "path relative to shared/" or "module:Class" -> why it may be larger.
ALLOWED: dict[str, str] = {
    "shared.providers.whatsapp:WhatsAppClient": "the WhatsApp client and its Graph API transport base",
    "shared.providers.meta_messaging:InstagramClient": "the Instagram client over the Messenger client",
}


def file_sizes() -> dict[str, int]:
    return {path.relative_to(SHARED).as_posix(): len(path.read_text().splitlines())
            for path in sorted(SHARED.rglob("*.py"))}


def composed_sizes() -> dict[str, tuple[int, int]]:
    """"module:Class" -> (lines, methods) of every class defined under
    shared/, summed over the project's classes in its MRO (itself and every
    base defined under shared/; Protocols, ABCs and the standard library's
    bases are not the project's)."""
    sizes = {}
    for info in pkgutil.walk_packages(shared.__path__, "shared."):
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            lines = methods = 0
            for part in cls.__mro__:
                if not part.__module__.startswith("shared."):
                    continue
                source = textwrap.dedent(inspect.getsource(part))
                lines += len(source.splitlines())
                body = ast.parse(source).body[0]
                assert isinstance(body, ast.ClassDef)
                methods += sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in body.body)
            sizes[f"{module.__name__}:{name}"] = (lines, methods)
    return sizes


def test_no_file_under_shared_is_over_500_lines():
    files = file_sizes()
    assert files, "no source found under shared/"
    over = {f: n for f, n in files.items() if n > MAX_FILE_LINES and f not in ALLOWED}
    assert not over, f"split these by concern (lines): {over}"


def test_no_class_under_shared_is_over_250_lines_or_30_methods_with_what_it_inherits():
    classes = composed_sizes()
    assert "shared.room.context:Transition" in classes
    over = {c: s for c, s in classes.items()
            if (s[0] > MAX_CLASS_LINES or s[1] > MAX_CLASS_METHODS) and c not in ALLOWED}
    assert not over, f"split these objects by concern ((lines, methods) with their project bases): {over}"


def test_a_class_is_measured_with_its_mixins():
    """A class is as large as what it inherits from the project: the measure
    that missed `Transition` (six mixins, one class statement). The
    Instagram client over the Messenger client is the one left to show it."""
    classes = composed_sizes()
    from shared.providers.meta_messaging import InstagramClient

    assert [b for b in InstagramClient.__mro__[1:] if b.__module__.startswith("shared.")]
    own = len(inspect.getsource(InstagramClient).splitlines())
    assert classes["shared.providers.meta_messaging:InstagramClient"][0] > own


def test_every_allowed_exception_is_still_needed():
    files, classes = file_sizes(), composed_sizes()
    stale = [k for k in ALLOWED
             if (":" in k and k in classes and classes[k][0] <= MAX_CLASS_LINES
                 and classes[k][1] <= MAX_CLASS_METHODS)
             or (":" in k and k not in classes)
             or (":" not in k and files.get(k, 0) <= MAX_FILE_LINES)]
    assert not stale, f"no longer over the limit: remove from ALLOWED: {stale}"


def test_the_service_is_composed_not_assembled_from_mixins():
    """Issue 45 item 1: each handler object of shared/service/ holds the
    `ServiceCore` it needs as a field; no class there has more than one
    project class in its ancestry (an exception's one base aside), so every
    call between the parts is an import or a held object's method."""
    import shared.service

    assembled = {}
    for info in pkgutil.walk_packages(shared.service.__path__, "shared.service."):
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                bases = [b.__name__ for b in cls.__mro__[1:] if b.__module__.startswith("shared.")]
                if len(bases) > 1:
                    assembled[f"{module.__name__}:{name}"] = bases
    bases = [b.__name__ for b in shared.service.DeliveryService.__mro__[1:] if b.__module__.startswith("shared.")]
    assert not assembled and not bases, f"assembled from project classes: {assembled or bases}"


def test_the_facade_takes_a_built_core_not_a_copy_of_its_arguments():
    """Issue 45: `DeliveryService`'s constructor repeated `ServiceCore`'s
    keyword list; it takes the built core (shared/bootstrap.py `wire`)."""
    import shared.service

    params = list(inspect.signature(shared.service.DeliveryService).parameters)
    assert params == ["core"], params
