"""What OneFlow 0.9.0 allocates on each rank for a compiled nn.Graph: its own accounting.

At compile, rank 0 turns the Job into a Plan whose memory blocks are every buffer the runtime
allocates, per rank (`PlanUtil::GenMemBlockAndChunkWithVariableOpNames4Plan`). On CPU ranks
each block is allocated once and zero-filled when the runtime starts (`CpuDevice::Alloc`
memsets it), so it is resident for the whole run: the blocks are what a rank holds for the
graph. OneFlow's own memory log (`PlanUtil::PlanMemoryLog`) counts device memory only and
prints nothing on CPU; with the session's debug mode on, rank 0 writes the whole Plan as text
(`log/.../job_<graph>_plan`), which this module reads.

A rank's step memory is then the blocks of the Job's ops, variables and boxings, by what they
hold; the blocks of OneFlow's control registers (ticks, critical sections, the interface's
wait-and-send-ids, the train-step counter: the same whatever the model) are
counted apart, as "control" (0.35 MiB a rank on the examples' graphs on 4 CPU ranks).
"""

import glob
import os
from typing import Dict, List, Tuple

from google.protobuf import text_format
from oneflow.core.job import plan_pb2, task_pb2
from oneflow.framework.config_util import _set_resource_attr

CATEGORIES = ("variables", "outputs", "workspaces", "boxing", "control")
_BOXING_TASKS = ("kSliceBoxing", "kCopyCommNet", "kBoxingZeros", "kCollectiveBoxingGeneric")


def dump_plans() -> None:
    """Have rank 0 write the Plan of every graph compiled from now on (the session's debug
    mode; it also writes the task graph and the Job, so keep it to measurements)."""
    _set_resource_attr("enable_debug_mode", True, bool)


def plan_path(graph_name: str, root: str = "log") -> str:
    found = glob.glob(os.path.join(root, "**", f"job_{graph_name}_plan"), recursive=True)
    if not found:
        raise FileNotFoundError(
            f"no Plan of graph {graph_name} under {root}/: call dump_plans() before it compiles, "
            "and read it on rank 0"
        )
    return found[0]


def load_plan(path: str) -> plan_pb2.Plan:
    plan = plan_pb2.Plan()
    with open(path) as f:
        text_format.Parse(f.read(), plan)
    return plan


def _category(task, regst_name: str, lbn: str, variable: bool) -> str:
    return _category_of(task_pb2.TaskType.Name(task.task_type), regst_name, lbn, variable)


def _category_of(kind: str, regst_name: str, lbn: str, variable: bool) -> str:
    if variable:
        return "variables"
    if kind in _BOXING_TASKS or lbn.startswith(("System-Boxing", "Sys-Boxing")):
        return "boxing"
    if kind != "kNormalForward" or lbn.startswith("System-"):
        return "control"
    return "workspaces" if regst_name == "tmp" else "outputs"


def memory_by_rank(plan: plan_pb2.Plan) -> Dict[int, Dict[str, float]]:
    """rank -> bytes of its memory blocks by CATEGORIES (a block shared by several registers,
    if any, counted once, for the first)."""
    blocks = {mb.mem_block_id: mb for mb in plan.block_chunk_list.mem_block}
    out: Dict[int, Dict[str, float]] = {}
    seen = set()
    for task in plan.task:
        for name, regst in task.produced_regst_desc.items():
            block = blocks.get(regst.mem_block_id)
            if block is None or block.mem_block_id in seen:
                continue
            seen.add(block.mem_block_id)
            lbn = ""
            if regst.regst_desc_type.HasField("data_regst_desc"):
                lbi = regst.regst_desc_type.data_regst_desc.lbi2blob_desc[0].lbi
                lbn = f"{lbi.op_name}/{lbi.blob_name}"
            category = _category(task, name, lbn, bool(block.variable_op_name))
            rank = out.setdefault(block.machine_id, {c: 0.0 for c in CATEGORIES})
            rank[category] += block.mem_size
    return out


def _value(line: str) -> str:
    return line.split(": ", 1)[1].strip().strip('"')


def _regst(lines: List[str]) -> Tuple[str, int, str]:
    """(name, memory block, first blob's lbn) of one produced_regst_desc's lines."""
    name, block, op, blob = "", -1, "", ""
    for line in lines:
        text = line.strip()
        if text.startswith("key:") and not name:
            name = _value(text)
        elif text.startswith("mem_block_id:") and block < 0:
            block = int(_value(text))
        elif text.startswith("op_name:") and not op:
            op = _value(text)
        elif text.startswith("blob_name:") and not blob:
            blob = _value(text)
    return name, block, f"{op}/{blob}" if op else ""


def read_memory(path: str) -> Dict[int, Dict[str, float]]:
    """memory_by_rank of the Plan text at `path`, reading only the lines it needs (a 2 x 2 plan
    of the examples is ~11 MB, which protobuf's text parser takes seconds over): the printer
    writes one field a line, two spaces deeper each level."""
    blocks: Dict[int, Dict[str, float]] = {}
    regsts: List[Tuple[str, str, int, str]] = []  # (task type, name, block, lbn)
    task_type, collecting, block = "", None, None
    with open(path) as f:
        for line in f:
            depth = len(line) - len(line.lstrip(" "))
            text = line.strip()
            if collecting is not None:
                if depth == 2 and text == "}":
                    regsts.append((task_type, *_regst(collecting)))
                    collecting = None
                else:
                    collecting.append(line)
            elif depth == 0:
                task_type, block = "", None
            elif depth == 2 and text.startswith("task_type:"):
                task_type = _value(text)
            elif depth == 2 and text == "produced_regst_desc {":
                collecting = []
            elif depth == 2 and text == "mem_block {":
                block = {"variable": 0.0}
            elif depth == 4 and block is not None:
                key = text.split(":", 1)[0]
                if key in ("mem_block_id", "machine_id", "mem_size"):
                    block[key] = float(_value(text))
                elif key == "variable_op_name":
                    block["variable"] = 1.0
                if "mem_block_id" in block:
                    blocks[int(block["mem_block_id"])] = block
    out: Dict[int, Dict[str, float]] = {}
    seen = set()
    for kind, name, block_id, lbn in regsts:
        b = blocks.get(block_id)
        if b is None or block_id in seen:
            continue
        seen.add(block_id)
        rank = out.setdefault(int(b["machine_id"]), {c: 0.0 for c in CATEGORIES})
        rank[_category_of(kind, name, lbn, bool(b["variable"]))] += b["mem_size"]
    return out


def step_memory(by_category: Dict[str, float]) -> float:
    """A rank's memory for the step: everything but OneFlow's control registers."""
    return sum(v for c, v in by_category.items() if c != "control")
