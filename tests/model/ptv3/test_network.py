"""PointTransformerV3 as a whole: bad input, input order, training mode, the constructor's checks.

(Equality with Pointcept's network is in test_pointcept_equivalence.py.)
"""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.ptv3 import PointTransformerV3, PTv3Segmentor

SMALL = dict(in_channels=4, order=("z", "z-trans", "hilbert", "hilbert-trans"), stride=(2, 2),
             enc_depths=(2, 1, 1), enc_channels=(8, 16, 16), enc_num_head=(2, 2, 2), enc_patch_size=(16, 16, 16),
             dec_depths=(1, 1), dec_channels=(8, 16), dec_num_head=(2, 2), dec_patch_size=(16, 16), mlp_ratio=2)


def cloud(counts=(70, 30), seed=0, side=10):
    gen = torch.Generator().manual_seed(seed)
    grids = [torch.randperm(side ** 3, generator=gen)[:n] for n in counts]
    grid = torch.stack([(g := torch.cat(grids)) // side ** 2, g // side % side, g % side], 1)
    coord = grid.float() * 0.05
    return dict(coord=coord, grid_coord=grid, feat=torch.randn(len(grid), 4, generator=gen),
                offset=torch.cumsum(torch.tensor(counts), 0))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return PointTransformerV3(**SMALL).eval()


def run(model, seed=5, **inputs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(**inputs)


def test_output_follows_the_input_order(model):
    """Permuting the points within and across clouds' rows permutes the output rows (same seed)."""
    data = cloud()
    out = run(model, **data)
    perm = torch.cat([torch.randperm(70), 70 + torch.randperm(30)])
    moved = dict(data, coord=data["coord"][perm], grid_coord=data["grid_coord"][perm], feat=data["feat"][perm])
    torch.testing.assert_close(run(model, **moved), out[perm], atol=1e-5, rtol=1e-5)


def test_one_point_and_clouds_shorter_than_a_patch(model):
    one = cloud(counts=(1,))
    assert run(model, **one).shape == (1, 8)
    assert torch.isfinite(run(model, **one)).all()
    few = cloud(counts=(3, 1, 9))
    out = run(model, **few)
    assert out.shape == (13, 8) and torch.isfinite(out).all()
    # the clouds in the other order (same grid, so the same serialization depth): their outputs move along,
    # so no cloud's features depend on its neighbours in the batch or on its place
    swap = torch.cat([torch.arange(4, 13), torch.tensor([3]), torch.arange(3)])
    moved = {k: few[k][swap] for k in ("coord", "grid_coord", "feat")}
    torch.testing.assert_close(run(model, **moved, offset=torch.tensor([9, 10, 13])), out[swap],
                               atol=1e-5, rtol=1e-5)


def test_bad_input_names_the_argument(model):
    data = cloud()
    dup = data["grid_coord"].clone()
    dup[1] = dup[0]
    out = run(model, **dict(data, grid_coord=dup))           # a shared voxel (Mix3D): one output per point
    assert out.shape[0] == len(dup) and bool(torch.isfinite(out).all())
    far = data["grid_coord"].clone()
    far[0, 2] = 2 ** 16
    with pytest.raises(ValueError, match="grid_coord reaches 65536"):
        run(model, **dict(data, grid_coord=far))
    with pytest.raises(ValueError, match="grid_coord >= 0"):
        run(model, **dict(data, grid_coord=data["grid_coord"] - 1))
    with pytest.raises(ValueError, match="offset"):
        run(model, **dict(data, offset=torch.tensor([70, 99])))
    with pytest.raises(ValueError, match="offset"):
        run(model, **dict(data, offset=torch.tensor([70, 70, 100])))
    with pytest.raises(ValueError, match="feat"):
        run(model, **dict(data, feat=data["feat"][:5]))
    with pytest.raises(ValueError, match="in_channels"):
        run(model, **dict(data, feat=torch.randn(100, 6)))
    with pytest.raises(ValueError, match="coord"):
        run(model, **dict(data, coord=data["coord"][:, :2]))
    nan = data["coord"].clone()
    nan[3, 1] = float("nan")
    with pytest.raises(ValueError, match="expected finite coord, got 1 non-finite"):
        run(model, **dict(data, coord=nan))
    # finite coordinates of 1e19 overflowed GeoPE's float32 axis norm (NaN logits without a word): refused
    # beyond +-2^60 as the point ops refuse them
    with pytest.raises(ValueError, match=r"expected coord within \+-2\^60 .*, got 300 values outside"):
        run(model, **dict(data, coord=(1 + data["coord"].abs()) * 1e19))
    inf = data["coord"].half()                             # float16 rounds 2^60 to inf: its inf is still refused
    inf[3, 1] = float("inf")
    with pytest.raises(ValueError, match="expected finite coord, got 1 non-finite"):
        run(model, **dict(data, coord=inf))


def test_bad_offsets_name_the_entry_at_fault_whatever_the_number_of_clouds():
    """12 clouds, the eleventh empty: the refusal names ``offset[10]``, as PTv1's inputs check does
    (``ops.offsets.check_offset``); it showed the first 8 offsets, all right, cut with no mark."""
    from pointgeope.model.ptv3.structure import check_inputs

    n = 120
    coord, grid, feat = torch.zeros(n, 3), torch.zeros(n, 3, dtype=torch.long), torch.zeros(n, 4)
    offset = torch.arange(10, n + 1, 10)
    offset[10] = offset[9]
    with pytest.raises(ValueError) as err:
        check_inputs(coord, grid, feat, offset)
    assert str(err.value) == ("expected strictly increasing positive offset (no empty cloud), got offset[10] = 100 "
                              "after 100")
    with pytest.raises(ValueError) as err:
        check_inputs(coord, grid, feat, torch.arange(10, n, 10))
    assert str(err.value) == f"expected offset[-1] == number of points {n}, got 110"
    check_inputs(coord, grid, feat, torch.arange(10, n + 1, 10))


def test_bool_and_complex_grid_coord_and_offsets_are_refused_by_name(model):
    """A bool ``grid_coord`` passed the float check and ``.long()`` made it cells 0 and 1: the network ran
    on a 2x2x2 grid without a word; a complex one raised torch's ``"min_all" not implemented for
    'ComplexFloat'``. Both are now the one line naming grid_coord and its dtype, as bool offsets are."""
    data = cloud()
    for dtype in (torch.bool, torch.complex64):
        with pytest.raises(ValueError) as err:
            run(model, **dict(data, grid_coord=data["grid_coord"].to(dtype)))
        assert str(err.value) == f"expected grid_coord of shape (100, 3) integer, got (100, 3) {dtype}"
    with pytest.raises(ValueError) as err:
        run(model, **dict(data, offset=torch.tensor([True, True])))
    assert str(err.value) == "expected offset of shape (B,) integer, got (2,) torch.bool"
    run(model, **dict(data, grid_coord=data["grid_coord"].to(torch.int16)))   # any integer dtype is taken


def test_training_step_reaches_every_parameter():
    torch.manual_seed(0)
    net = PTv3Segmentor(5, 8, PointTransformerV3(**dict(SMALL, drop_path=0.3, enable_rpe=True))).train()
    logits = net(**cloud())
    torch.nn.functional.cross_entropy(logits, torch.randint(0, 5, (100,))).backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert any(float(p.grad.abs().max()) > 0 for n, p in net.named_parameters() if "rpe" in n)


def test_enc_mode_returns_the_coarsest_stage():
    torch.manual_seed(0)
    net = PointTransformerV3(**dict(SMALL, enc_mode=True)).eval()
    data = cloud()
    points = net.forward_points(**data)
    assert points.feat.shape[1] == 16 and len(points.feat) < 100
    assert net.out_channels == 16


def test_one_stage_without_enc_mode_is_the_encoder_stage():
    """One stage has no decoder (Pointcept builds an empty one and returns stage 0's features): the network
    without enc_mode builds (it raised an IndexError on dec_channels[0]) and equals the encoder-only one with
    the same weights, rows in input order, width enc_channels[0]."""
    one = dict(SMALL, stride=(), enc_depths=(2,), enc_channels=(8,), enc_num_head=(2,), enc_patch_size=(16,),
               dec_depths=(), dec_channels=(), dec_num_head=(), dec_patch_size=())
    torch.manual_seed(0)
    net = PointTransformerV3(**one).eval()
    enc = PointTransformerV3(**dict(one, enc_mode=True)).eval()
    enc.load_state_dict(net.state_dict(), strict=True)
    data = cloud()
    assert net.out_channels == enc.out_channels == 8
    out = run(net, **data)
    assert out.shape == (100, 8)
    assert torch.equal(out, run(enc, **data))
    perm = torch.cat([torch.randperm(70), 70 + torch.randperm(30)])
    moved = dict(data, coord=data["coord"][perm], grid_coord=data["grid_coord"][perm], feat=data["feat"][perm])
    torch.testing.assert_close(run(net, **moved), out[perm], atol=1e-5, rtol=1e-5)
    assert PTv3Segmentor(5, net.out_channels, net).eval()(**data).shape == (100, 5)


@pytest.mark.parametrize("stride,line", [((2, 6), "stride[1]: expected a power of two (1, 2, 4, 8, ...), got 6"),
                                         ((3, 2), "stride[0]: expected a power of two (1, 2, 4, 8, ...), got 3"),
                                         ((2, 0), "stride[1]: expected a power of two (1, 2, 4, 8, ...), got 0")])
def test_a_bad_stride_names_its_entry(stride, line):
    """The constructor named no argument ("expected a power of two >= 2, got 3", from the pooling it builds)."""
    with pytest.raises(ValueError) as err:
        PointTransformerV3(**dict(SMALL, stride=stride))
    assert str(err.value) == line


def test_stride_one_builds_and_its_stage_keeps_every_voxel():
    """Stride 1 = 2^0, which Pointcept's assertion accepts (it was refused): the stage after it keeps the
    input's grid, so on a cloud of distinct voxels the encoder's last stage has every point; the full network
    returns one row per point, in input order."""
    torch.manual_seed(0)
    data = cloud()
    one = PointTransformerV3(**dict(SMALL, stride=(1,), enc_depths=(1, 1), enc_channels=(8, 16),
                                    enc_num_head=(2, 2), enc_patch_size=(16, 16), dec_depths=(1,),
                                    dec_channels=(8,), dec_num_head=(2,), dec_patch_size=(16,), enc_mode=True))
    coarse = one.eval().forward_points(**data)
    assert coarse.feat.shape == (100, 16)
    assert sorted(map(tuple, coarse.grid_coord.tolist())) == sorted(map(tuple, data["grid_coord"].tolist()))
    net = PointTransformerV3(**dict(SMALL, stride=(1, 2))).eval()
    out = run(net, **data)
    perm = torch.cat([torch.randperm(70), 70 + torch.randperm(30)])
    moved = dict(data, coord=data["coord"][perm], grid_coord=data["grid_coord"][perm], feat=data["feat"][perm])
    assert out.shape == (100, 8)
    torch.testing.assert_close(run(net, **moved), out[perm], atol=1e-5, rtol=1e-5)


# Pointcept's PT-v3m1 constructor (pointcept/models/point_transformer_v3/point_transformer_v3m1_base.py, v1.6.1 and
# later, d74c646), its arguments in its order, with the values of its S3DIS config
# (configs/s3dis/semseg-pt-v3m1-0-base.py); up to v1.6.0 (10b7490) both name the encoder-only switch cls_mode
POINTCEPT_S3DIS = dict(
    in_channels=6, order=("z", "z-trans", "hilbert", "hilbert-trans"), stride=(2, 2, 2, 2),
    enc_depths=(2, 2, 2, 6, 2), enc_channels=(32, 64, 128, 256, 512), enc_num_head=(2, 4, 8, 16, 32),
    enc_patch_size=(1024,) * 5, dec_depths=(2, 2, 2, 2), dec_channels=(64, 64, 128, 256),
    dec_num_head=(4, 4, 8, 16), dec_patch_size=(1024,) * 4, mlp_ratio=4, qkv_bias=True, qk_scale=None,
    attn_drop=0.0, proj_drop=0.0, drop_path=0.3, pre_norm=True, shuffle_orders=True, enable_rpe=False,
    enable_flash=True, upcast_attention=False, upcast_softmax=False, enc_mode=False, pdnorm_bn=False,
    pdnorm_ln=False, pdnorm_decouple=True, pdnorm_adaptive=False, pdnorm_affine=True,
    pdnorm_conditions=("ScanNet", "S3DIS", "Structured3D"))
POINTCEPT_1_6_0_S3DIS = {("cls_mode" if k == "enc_mode" else k): v for k, v in POINTCEPT_S3DIS.items()}


def test_the_constructor_takes_pointcepts_arguments_in_its_order():
    """The S3DIS config's backbone dict (without ``type``) builds as it is, positionally too, and that of
    Pointcept v1.6.0, whose switch is ``cls_mode``, builds the same network."""
    import inspect
    names = list(inspect.signature(PointTransformerV3).parameters)
    assert names[:len(POINTCEPT_S3DIS)] == list(POINTCEPT_S3DIS)
    size = {}
    for name, kwargs in (("now", POINTCEPT_S3DIS), ("1.6.0", POINTCEPT_1_6_0_S3DIS)):
        net = PointTransformerV3(**kwargs)
        assert not net.enc_mode and not net.cls_mode and net.out_channels == 64 and hasattr(net, "dec")
        size[name] = sum(p.numel() for p in net.parameters())
    size["positional"] = sum(p.numel() for p in PointTransformerV3(*POINTCEPT_S3DIS.values()).parameters())
    assert len(set(size.values())) == 1, size


@pytest.mark.parametrize("names", [dict(cls_mode=True), dict(enc_mode=True), dict(cls_mode=True, enc_mode=True)])
def test_enc_mode_and_its_older_name_cls_mode_build_the_encoder_only(names):
    net = PointTransformerV3(**dict(SMALL, **names))
    assert net.enc_mode and net.cls_mode and net.out_channels == 16 and not hasattr(net, "dec")


def test_enc_mode_and_cls_mode_that_disagree_are_refused():
    with pytest.raises(ValueError, match=r"enc_mode=False and cls_mode=True .* disagree"):
        PointTransformerV3(**dict(SMALL, cls_mode=True, enc_mode=False))
    with pytest.raises(ValueError, match=r"enc_mode=True and cls_mode=False"):
        PointTransformerV3(**dict(SMALL, cls_mode=False, enc_mode=True))


def test_constructor_checks():
    with pytest.raises(ValueError, match="enc_channels"):
        PointTransformerV3(**dict(SMALL, enc_channels=(8, 16)))
    with pytest.raises(ValueError, match="dec_num_head"):
        PointTransformerV3(**dict(SMALL, dec_num_head=(2,)))
    with pytest.raises(ValueError, match="order"):
        PointTransformerV3(**dict(SMALL, order=("z", "morton")))
    with pytest.raises(ValueError, match="pdnorm"):
        PointTransformerV3(**dict(SMALL, pdnorm_bn=True))
    with pytest.raises(ValueError, match="backbone_out_channels"):
        PTv3Segmentor(13, 64, PointTransformerV3(**SMALL))


def test_neighbour_tables_and_partitions_are_built_once_per_stage(model, monkeypatch):
    """Pointcept's indice_key: one 3^3 table per stage shared by the encoder's and decoder's blocks, one 5^3
    for the stem; one patch partition per stage."""
    import pointgeope.model.ptv3.attention as attention
    import pointgeope.model.ptv3.block as block

    calls = {"subm": [], "patches": 0}
    real_build, real_partition = block.build_neighbours, attention.partition

    def build(grid, batch, k):
        calls["subm"].append(k)
        return real_build(grid, batch, k)

    def part(counts, k):
        calls["patches"] += 1
        return real_partition(counts, k)

    monkeypatch.setattr(block, "build_neighbours", build)
    monkeypatch.setattr(attention, "partition", part)
    run(model, **cloud())
    assert sorted(calls["subm"]) == [3, 3, 3, 5] and calls["patches"] == 3


@pytest.mark.parametrize("upcast", [False, True])
def test_bfloat16_autocast_with_rpe(upcast, monkeypatch):
    """Under autocast the attention runs in bfloat16 (in float32 with the upcasts), RPE bias included, and
    stays close to float32."""
    from pointgeope.model.ptv3 import attention
    seen, sdpa = [], attention.aligned_attention
    monkeypatch.setattr(attention, "aligned_attention", lambda q, *a: seen.append(q.dtype) or sdpa(q, *a))
    torch.manual_seed(0)
    net = PointTransformerV3(**dict(SMALL, enable_rpe=True, upcast_attention=upcast, upcast_softmax=upcast)).eval()
    data = cloud()
    full = run(net, **data)
    del seen[:]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = run(net, **data)
    assert seen and set(seen) == {torch.float32 if upcast else torch.bfloat16}
    assert float((half.float() - full).abs().max()) < 0.1 * float(full.abs().max())


def test_a_host_list_offset_is_the_tensor_offset(model):
    """A list (as ``ops.check_offset`` and PTv1 take it) gives the tensor's output; a float list is refused, not
    truncated; something else is one line."""
    data = cloud()
    expected = run(model, **data)
    assert torch.equal(run(model, **dict(data, offset=[70, 100])), expected)
    with pytest.raises(ValueError, match=r"expected offset of shape \(B,\) integer, got \(2,\) torch.float32"):
        run(model, **dict(data, offset=[70.5, 100]))
    with pytest.raises(ValueError, match=r"expected offset a .*integer tensor or list of ints, got"):
        run(model, **dict(data, offset=["70", 100]))


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("model_dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_feature_dtypes_the_network_cannot_take_are_one_type_error_naming_feat(model_dtype, autocast, monkeypatch):
    """float64 features into a float32 network died in the stem's products ("expected m1 and m2 to have the same
    dtype"). Every feature dtype either runs, or is a ``TypeError`` naming ``feat`` and the model's dtype, and the
    network without the check fails on it; coordinates of any float dtype run (geometry, cast where used)."""
    import pointgeope.model.ptv3.embedding as embedding

    torch.manual_seed(0)
    net = PTv3Segmentor(5, 8, PointTransformerV3(**SMALL)).eval().to(model_dtype)
    data = cloud()
    refused = 0
    for coord_dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for feat_dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            inputs = dict(data, coord=data["coord"].to(coord_dtype), feat=data["feat"].to(feat_dtype))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                try:
                    run(net, **inputs)
                    continue
                except TypeError as e:
                    refused += 1
                    assert str(e) == (f"expected feat in the model's dtype {model_dtype}, got {feat_dtype}: cast it "
                                      f"(feat.to({model_dtype})) or the model (model.to({feat_dtype}))")
                with monkeypatch.context() as m, pytest.raises(RuntimeError):
                    m.setattr(embedding, "check_model_dtype", lambda *a, **k: None)
                    run(net, **inputs)
    assert refused >= 4


def test_the_flash_partition_keeps_a_cloud_apart_from_its_batch_at_one_serialization_depth():
    """docs/ptv3.md: a cloud's features do not depend on the clouds batched with it when they share one
    serialization depth (any order); a cloud of larger extent raises the batch's depth, which the Hilbert
    orders depend on and the z-orders do not."""
    small, same_depth = cloud((60,), seed=1, side=8), cloud((90,), seed=2, side=8)
    deeper = cloud((90,), seed=3, side=40)
    for order, depth_matters in ((("z", "z-trans"), False), (("hilbert", "hilbert-trans"), True)):
        torch.manual_seed(0)
        net = PointTransformerV3(**dict(SMALL, order=order, shuffle_in_eval=False, drop_path=0.0)).eval()
        alone = run(net, **small)
        for other, differs in ((same_depth, False), (deeper, depth_matters)):
            both = {k: torch.cat([small[k], other[k]]) for k in ("coord", "grid_coord", "feat")}
            both["offset"] = torch.tensor([60, 150])
            gap = float((run(net, **both)[:60] - alone).abs().max() / alone.abs().max())
            assert (gap > 1e-3) if differs else (gap < 1e-5), (order, differs, gap)
