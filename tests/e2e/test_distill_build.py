"""Whole builds. Certified distillation: proven cells, resolved cells with witnesses, the confident bit, determinism."""

from __future__ import annotations


from conftest import two_action_model, two_action_spec


def test_refuse_policy_fails_the_build_when_a_cell_holds_two_actions(tmp_path):
    from mi_certify.generator.pipeline.runner import BuildOptions, build
    model = two_action_model(tmp_path)
    two_action_spec(tmp_path, distill_section="distill: {resolve: refuse}")
    res = build(model, tmp_path / "sla.yaml", tmp_path / "out", BuildOptions(verify=False, skip_lint=True, skip_synth=True,
                                                                             skip_cosim=True))
    assert res.status == "failed" and res.summary["failed_stages"] == ["lut"]
    assert res.summary["stages"]["lut"]["error"].startswith("distill.resolve is refuse and 2 cells")


def test_heatmap_png_marks_resolved_cells(tmp_path):
    from mi_certify.generator.pipeline.runner import BuildOptions, build
    model = two_action_model(tmp_path)
    two_action_spec(tmp_path)
    res = build(model, tmp_path / "sla.yaml", tmp_path / "out", BuildOptions(verify=False, skip_lint=True, skip_synth=True,
                                                                             skip_cosim=True, heatmap=("x", "z")))
    png = tmp_path / "out" / "heatmap_x_z.png"
    assert res.status == "incomplete" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = build(model, tmp_path / "sla.yaml", tmp_path / "out2", BuildOptions(verify=False, skip_lint=True, skip_synth=True,
                                                                                skip_cosim=True, heatmap=("x", "z")))
    assert (tmp_path / "out2" / "heatmap_x_z.png").read_bytes() == png.read_bytes()
    assert again.status == "incomplete"
