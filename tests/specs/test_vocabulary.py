"""The specs in spec/ against the fixed action vocabulary and the house style.

Every action name of hicache.protocol.vocabulary must be an operator of its module; every
module has the house-style skeleton (commented VARIABLES, TypeOK, Init, Next, Spec), a CI
model and bug twins that differ from the CI model by exactly one bug constant switched on,
and states the safety properties of DESIGN.md's table under their names.
"""
from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest
import tla

from hicache.monitors.codegen import module_name
from hicache.protocol.vocabulary import SPECS

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"

#: DESIGN.md's table of safety properties, by the names the specs give them.
DESIGN_INVARIANTS: dict[str, tuple[str, ...]] = {
    "CPSharding": ("PlacementBijection", "PositionOwner", "ExtensionKeepsRotation",
                   "SpliceRotationsAgree", "RestoreKeepsOwner"),
    "LayerPipeline": ("GatherAfterRestore", "AttentionReadsGathered", "NoOverwriteWhileRead"),
    "PPSync": ("SameCountEachCheck", "ApplyOnlyCompleted"),
    "PrefixAgreement": ("PublishedLeLoaded", "SameCachedPrefix", "AcksInStep"),
    "HostTier": ("SlotInOneOwner", "PendingLoadLocked", "WriteThroughPrefix"),
    "DraftState": ("CompletionAfterAllCopies", "NoReadBeforeCompletion", "PackedOnlyCompatible"),
    "PDHandoff": ("SendAfterLoadBack", "DecodeReadsTransferred", "NoLeakOnAbort"),
}

#: the bug each twin seeds and the property that must catch it ("deadlock": no successor).
TWINS: dict[str, tuple[str, str, str]] = {
    "CPSharding_bug": ("CPSharding", "BugSpliceAnyRotation", "SpliceRotationsAgree"),
    "LayerPipeline_bug": ("LayerPipeline", "BugSkipRestoreWait", "GatherAfterRestore"),
    "LayerPipeline_bug_slot": ("LayerPipeline", "BugSkipSlotWait", "NoOverwriteWhileRead"),
    "PPSync_bug": ("PPSync", "BugLocalCount", "SameCountEachCheck"),
    "PrefixAgreement_bug": ("PrefixAgreement", "ConsumeLatestProgress", "SameCachedPrefix"),
    "PrefixAgreement_bug_noack": ("PrefixAgreement", "BugNoAckAfterStop", "deadlock"),
    "HostTier_bug": ("HostTier", "BugEvictDuringLoad", "PendingLoadLocked"),
    "HostTier_bug_abort": ("HostTier", "BugAbortLeak", "SlotInOneOwner"),
    "DraftState_bug": ("DraftState", "BugFireOnTargetOnly", "CompletionAfterAllCopies"),
    "DraftState_bug_pack": ("DraftState", "BugPackIncompatible", "PackedOnlyCompatible"),
    "PDHandoff_bug": ("PDHandoff", "BugAbortFreesInFlight", "InFlightDestOwned"),
    "PDHandoff_bug_send": ("PDHandoff", "BugSendBeforeLoadBack", "SendAfterLoadBack"),
}

MODULES = sorted(SPECS)
#: modules in spec/ that restate a vocabulary module in the fragment `hicache prove` translates
#: (same action names, no actions of their own): not vocabulary modules themselves.
PROOF_CORES = {"PrefixAgreementCore"}


@cache
def source(module: str) -> str:
    return (SPEC_DIR / f"{module}.tla").read_text()


@cache
def parsed(module: str):
    tree = tla.parse(source(module))
    assert tree is not None, f"spec/{module}.tla does not parse"
    return tree


def units(module: str, kind: str) -> list:
    return [u for u in parsed(module).units if type(u).__name__ == kind]


def operators(module: str) -> set[str]:
    return {u.name for u in units(module, "OperatorDefinition")}


def variables(module: str) -> list:
    return [n for u in units(module, "Variables") for n in u.names]


CFG_KEYWORDS = {"SPECIFICATION", "INIT", "NEXT", "PROPERTY", "PROPERTIES", "CONSTRAINT", "CONSTRAINTS",
                "ACTION_CONSTRAINT", "ACTION_CONSTRAINTS", "SYMMETRY", "VIEW", "CHECK_DEADLOCK", "ALIAS",
                "POSTCONDITION"}


def parse_cfg(path: Path) -> dict[str, object]:
    """The parts of a TLC model config these tests rely on: constants and invariants."""
    text = re.sub(r"\\\*.*", "", path.read_text())
    consts: dict[str, str] = {}
    invariants: list[str] = []
    section = None
    for tok_line in text.splitlines():
        line = tok_line.strip()
        if not line:
            continue
        head = line.split()[0]
        if head in ("CONSTANT", "CONSTANTS"):
            section, line = "const", line[len(head):].strip()
        elif head in ("INVARIANT", "INVARIANTS"):
            section, line = "inv", line[len(head):].strip()
        elif head in CFG_KEYWORDS:
            section, line = "other", ""
        if not line:
            continue
        if section == "const":
            name, _, value = line.partition("=")
            consts[name.strip()] = value.strip()
        elif section == "inv":
            invariants.extend(line.split())
    return {"constants": consts, "invariants": invariants}


def test_every_vocabulary_module_has_a_spec():
    assert sorted(p.stem for p in SPEC_DIR.glob("*.tla") if p.stem not in PROOF_CORES) == MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_name_matches_file(module):
    assert parsed(module).name == module


@pytest.mark.parametrize("module", MODULES)
def test_vocabulary_names_are_operators(module):
    missing = {a.value for a in SPECS[module]} - operators(module)
    assert not missing, f"spec/{module}.tla lacks actions {sorted(missing)}"


#: spec actions that are not runtime events: the final stutter of every terminating module,
#: and DraftState's modelling of a copy that finishes after the (buggy) completion
NOT_EVENTS = {"Terminated", "LateDraftCopy"}


@pytest.mark.parametrize("module", ["PDHandoff"])
def test_every_spec_action_is_in_the_vocabulary(module):
    """The other direction for modules whose runtime emits every step (the PDHandoff monitor
    checks each engine's step): every disjunct of Next names a vocabulary action."""
    gen = importlib.import_module(f"hicache.monitors.generated.{module_name(module)}")
    assert set(gen.ACTIONS) - NOT_EVENTS == {a.value for a in SPECS[module]}


@pytest.mark.parametrize("module", MODULES)
def test_house_skeleton(module):
    assert {"vars", "TypeOK", "Init", "Next", "Spec"} <= operators(module)
    assert re.search(r"^Spec == Init /\\ \[\]\[Next\]_vars$", source(module), re.M)
    # a boxed prose header right after the module line
    assert source(module).splitlines()[1].startswith("(****")


@pytest.mark.parametrize("module", MODULES)
def test_every_variable_has_a_comment(module):
    lines = source(module).splitlines()
    names = variables(module)
    assert names, f"spec/{module}.tla declares no variables"
    for n in names:
        line = lines[n.start.line]  # positions are 0-based
        assert "\\*" in line[n.end.column:], f"{module}: variable {n.operator} has no comment"


@pytest.mark.parametrize("module", MODULES)
def test_design_invariants_are_named_and_checked(module):
    ops = operators(module)
    ci = parse_cfg(SPEC_DIR / f"{module}.cfg")
    for name in DESIGN_INVARIANTS[module]:
        assert name in ops, f"spec/{module}.tla does not define {name}"
        assert name in ci["invariants"], f"spec/{module}.cfg does not check {name}"


@pytest.mark.parametrize("cfg", sorted(p.name for p in SPEC_DIR.glob("*.cfg")))
def test_config_names_defined_operators(cfg):
    module = cfg.split("_")[0].removesuffix(".cfg")
    conf = parse_cfg(SPEC_DIR / cfg)
    ops = operators(module)
    declared = {n.operator for u in units(module, "Constants") for n in u.names}
    assert set(conf["constants"]) == declared, f"{cfg} must give every constant of {module}"
    for inv in conf["invariants"]:
        assert inv in ops, f"{cfg} checks {inv}, which {module} does not define"


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_twin_switches_exactly_its_bug_constant(twin):
    module, bug, caught_by = TWINS[twin]
    ci = parse_cfg(SPEC_DIR / f"{module}.cfg")["constants"]
    tw = parse_cfg(SPEC_DIR / f"{twin}.cfg")
    diff = {k for k in ci if ci[k] != tw["constants"][k]}
    assert diff == {bug}
    assert (ci[bug], tw["constants"][bug]) == ("FALSE", "TRUE")
    if caught_by != "deadlock":
        # the catching property is checked first, so the checker names it
        assert tw["invariants"][0] == caught_by
        assert caught_by in operators(module)


def test_every_twin_is_listed():
    on_disk = {p.stem for p in SPEC_DIR.glob("*_bug*.cfg")}
    assert on_disk == set(TWINS)
    assert {m for m, _, _ in TWINS.values()} == set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_bug_constants_are_declared_booleans(module):
    declared = {n.operator for u in units(module, "Constants") for n in u.names}
    bugs = {b for m, b, _ in TWINS.values() if m == module}
    assert bugs <= declared
    for b in bugs:
        assert re.search(rf"{b} \\in BOOLEAN", source(module)), f"{module}: ASSUME {b} \\in BOOLEAN"
