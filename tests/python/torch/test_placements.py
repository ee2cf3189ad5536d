# SPDX-License-Identifier: Apache-2.0
# The placement converter (chimera.placements, which chimera.torch uses too) over every DTensor
# placement type the installed torch defines: each becomes layout text the C++ parser accepts
# and comes back as the same DTensor placement, or is refused with chimera.Unsupported. One
# process, no communication (the DeviceMesh is a stand-in with the sizes and names the
# conversion reads).
import itertools

import pytest
import torch.distributed.tensor as dtensor
import torch.distributed.tensor._ops  # noqa: F401  (defines the op-private placements, e.g. _NormPartial)
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry
from torch.distributed.tensor.placement_types import Placement

import chimera
from chimera.torch.redistribute import Unplannable, layout_text

# DTensor's reduce ops chimera has no counterpart of (bitwise: integer tensors only).
UNSUPPORTED_REDUCE_OPS = ("band", "bor", "bxor")


class StandInMesh:
    """What the conversion reads of a DeviceMesh: dim names, sizes."""

    def __init__(self, text):
        self.chimera = chimera.Mesh(text)
        self.mesh_dim_names = tuple(self.chimera.axis_names)
        self.ndim = len(self.mesh_dim_names)

    def size(self, dim=None):
        return self.chimera.shape[dim] if dim is not None else self.chimera.size


def placement_types():
    """Every placement class torch defines, by name (the C++ bases' Python subclasses)."""
    found, todo = {}, [Placement]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("torch.distributed"):
                found[sub.__name__] = sub
    return found


def all_reduce_ops():
    documented = set(Partial.ALL_REDUCE_OPS) | set(UNSUPPORTED_REDUCE_OPS)
    return sorted(documented)


# One or more instances per placement class; the test fails when torch defines one not listed.
def samples(types):
    return {
        "Replicate": [Replicate()],
        "Shard": [Shard(0), Shard(1)],
        "Partial": [Partial(op) for op in all_reduce_ops()],
        "_StridedShard": [types["_StridedShard"](0, split_factor=2)] if "_StridedShard" in types else [],
        "_MaskPartial": [types["_MaskPartial"](offset_shape=(8,), offset_dim=0)] if "_MaskPartial" in types else [],
        "_NormPartial": [types["_NormPartial"](2)] if "_NormPartial" in types else [],
    }


def test_every_placement_type_is_covered():
    types = placement_types()
    unknown = set(types) - set(samples(types))
    assert not unknown, f"torch defines placement types this test does not convert: {sorted(unknown)}"
    assert {"Replicate", "Shard", "Partial"} <= set(types)


@pytest.mark.parametrize("placement", [p for ps in samples(placement_types()).values() for p in ps
                                       if type(p).__name__ in ("Replicate", "Shard", "Partial")], ids=repr)
@pytest.mark.parametrize("axis", [0, 1])
def test_round_trip_through_the_layout_parser(placement, axis):
    mesh = chimera.Mesh("dp=2,tp=3")
    placements = [Replicate(), Replicate()]
    placements[axis] = placement
    if isinstance(placement, Partial) and placement.reduce_op in UNSUPPORTED_REDUCE_OPS:
        with pytest.raises(chimera.Unsupported, match=placement.reduce_op):
            chimera.Layout.from_placements(mesh, placements)
        with pytest.raises(Unplannable):
            layout_text(StandInMesh("dp=2,tp=3"), placements)
        return
    layout = chimera.Layout.from_placements(mesh, placements)  # text parsed by the C++ parser
    assert layout.to_dtensor_placements() == placements
    text = layout_text(StandInMesh("dp=2,tp=3"), placements)
    assert chimera.Layout(text, mesh) == layout
    if isinstance(placement, Partial):
        expected = {"sum": "P", "product": "P(prod)"}.get(placement.reduce_op, f"P({placement.reduce_op})")
        assert str(layout) == f"{mesh.axis_names[axis]}={expected}"


@pytest.mark.parametrize("name", ["_MaskPartial", "_NormPartial"])
def test_partial_subclasses_are_refused(name):
    # They carry more than a reduce op (an embedding mask, a norm's exponent): not a chimera Partial.
    types = placement_types()
    if name not in types:
        pytest.skip(f"this torch has no {name}")
    placement = samples(types)[name][0]
    with pytest.raises(chimera.Unsupported, match=name):
        chimera.Layout.from_placements(chimera.Mesh("dp=2,tp=3"), [placement, Replicate()])
    with pytest.raises(Unplannable):
        layout_text(StandInMesh("dp=2,tp=3"), [placement, Replicate()])


def shard_orders(ndim):
    """Every order in which tensor dim 0 can be split over a non-empty set of the mesh dims."""
    for count in range(1, ndim + 1):
        for dims in itertools.permutations(range(ndim), count):
            yield dims


@pytest.mark.parametrize("order", list(shard_orders(3)), ids=str)
def test_shard_orders_and_strided_shards(order):
    # A tensor dim split by several mesh dims in DTensor's shard order, given as a shard_order
    # and as the _StridedShard placements that encode it: the layout nests in that order.
    stand_in = StandInMesh("a=2,b=3,c=2")
    mesh = stand_in.chimera
    placements = tuple(Shard(0) if d in order else Replicate() for d in range(3))
    shard_order = (ShardOrderEntry(tensor_dim=0, mesh_dims=order),)
    text = layout_text(stand_in, placements, shard_order)
    layout = chimera.Layout(text, mesh)
    assert layout.split_axes(0) == [mesh.axis_names[d] for d in order]
    strided = DTensorSpec._convert_shard_order_to_StridedShard(shard_order, placements, stand_in)  # noqa: SLF001
    assert layout_text(stand_in, strided) == text
    if list(order) == sorted(order):
        assert layout.to_dtensor_placements() == list(placements)
    else:
        with pytest.raises(chimera.Unsupported, match="not in mesh order"):
            layout.to_placements()


def test_shard_order_must_match_the_placements():
    stand_in = StandInMesh("a=2,b=3")
    with pytest.raises(Unplannable, match="shard order"):
        layout_text(stand_in, (Shard(0), Replicate()), (ShardOrderEntry(tensor_dim=0, mesh_dims=(0, 1)),))


def test_chimera_names_map_back_to_dtensor_names():
    mesh = chimera.Mesh("dp=2,tp=3")
    assert chimera.Layout("tp=P(prod)", mesh).to_dtensor_placements() == [Replicate(), Partial("product")]
    assert chimera.Layout.from_placements(mesh, [chimera.Partial("prod"), "R"]) == chimera.Layout("dp=P(prod)", mesh)
    assert dtensor.Partial("product") in chimera.Layout("dp=P(prod)", mesh).to_dtensor_placements()
