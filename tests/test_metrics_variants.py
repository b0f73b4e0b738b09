"""The DCGM naming-variant table: names, units, sentinels and detection."""

import pytest

from scheduler.metrics import variants as V


def test_legacy_and_4_9_names_and_units():
    legacy, new = V.METRIC_PROFILES["legacy"], V.METRIC_PROFILES["dcgm-4.7"]
    assert legacy[V.FB_USED].name == "DCGM_FI_DEV_FB_USED" and legacy[V.FB_USED].scale == 1.0
    assert new[V.FB_USED].name == "DCGM_FI_DEV_FB_USED_BYTES"
    assert 20971520000 * new[V.FB_USED].scale == pytest.approx(20000.0)  # bytes -> MiB
    assert legacy[V.GPU_UTIL].name == "DCGM_FI_DEV_GPU_UTIL" and 87 * legacy[V.GPU_UTIL].scale == pytest.approx(0.87)
    assert new[V.GPU_UTIL].name == "DCGM_FI_DEV_GPU_UTIL_RATIO" and new[V.GPU_UTIL].scale == 1.0
    assert legacy[V.XID].name == "DCGM_FI_DEV_XID_ERRORS" and new[V.XID].name == "DCGM_FI_DEV_XID_ERROR"
    assert new[V.FB_TOTAL].name == "DCGM_FI_DEV_FB_CAPACITY_BYTES" and new[V.FB_TOTAL].default
    assert not legacy[V.FB_TOTAL].default  # FB_TOTAL is not a legacy default counter


def test_every_profile_maps_every_canonical_field_once():
    for profile, fields in V.METRIC_PROFILES.items():
        assert set(fields) == set(V.CANONICAL_FIELDS), profile
        assert len({s.name for s in fields.values()}) == len(fields), profile


@pytest.mark.parametrize("raw", [9223372036854775794, 9223372036854775792, 140737488355328.0, 140737488355331.0,
                                 2147483632, 2147483635, float("nan")])
def test_dcgm_blank_values_are_not_available(raw):
    assert V.is_sentinel(raw)


@pytest.mark.parametrize("raw", [0, 81920, 87, 0.412, 20971520000, 700.5])
def test_real_values_are_not_sentinels(raw):
    assert not V.is_sentinel(raw)


def test_vectorised_sentinel_mask_agrees():
    values = [9223372036854775794, 140737488355329.0, 2147483633, float("inf"), 0, 81920, 0.412, 20971520000]
    assert V.sentinel_mask(values).tolist() == [V.is_sentinel(v) for v in values] == [True] * 4 + [False] * 4


def test_detect_legacy_with_exported_labels():
    names = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"]
    labels = ["Hostname", "UUID", "gpu", "modelName", "pod", "namespace", "container", "exported_pod",
              "exported_namespace", "exported_container", "instance", "job"]
    d = V.detect_variant(names, labels)
    assert d.profile == "legacy"
    assert (d.label("host"), d.label("uuid")) == ("Hostname", "UUID")
    # exported_* wins: plain pod/namespace are then the exporter pod's own target labels
    assert (d.label("pod"), d.label("namespace"), d.label("container")) == (
        "exported_pod", "exported_namespace", "exported_container")


def test_detect_4_9_with_lowercase_hostname_and_plain_pod():
    names = ["DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_CAPACITY_BYTES"]
    d = V.detect_variant(names, ["hostname", "UUID", "gpu", "pod", "namespace"])
    assert d.profile == "dcgm-4.7"
    assert (d.label("host"), d.label("pod"), d.label("namespace")) == ("hostname", "pod", "namespace")
    assert d.label("container") is None


def test_detect_old_namespace_labels():
    d = V.detect_variant(["DCGM_FI_DEV_FB_USED"], ["Hostname", "uuid", "gpu", "pod_name", "pod_namespace",
                                                   "container_name"])
    assert (d.label("uuid"), d.label("pod"), d.label("namespace"), d.label("container")) == (
        "uuid", "pod_name", "pod_namespace", "container_name")


def test_old_namespace_names_win_over_a_scrape_targets_plain_pod_label():
    d = V.detect_variant(["DCGM_FI_DEV_FB_USED"], ["Hostname", "uuid", "gpu", "pod", "namespace", "pod_name",
                                                   "pod_namespace", "container_name"])
    assert (d.label("pod"), d.label("namespace")) == ("pod_name", "pod_namespace")


def test_detect_with_nothing_defaults_to_legacy():
    assert V.detect_variant([], []).profile == "legacy"


def test_exporter_variants_cover_the_renames():
    ev = V.EXPORTER_VARIANTS
    assert (ev["classic"].host_label, ev["hostname"].host_label, ev["4.9.0"].host_label) == (
        "Hostname", "hostname", "hostname")
    assert ev["4.9.0"].driver_label == "DCGM_FI_SYSTEM_DRIVER_VERSION"
    assert ev["old-namespace"].attribute_labels == {"pod": "pod_name", "namespace": "pod_namespace",
                                                    "container": "container_name"}
    for variant in ev.values():
        d = V.variant_for_exporter(variant)
        assert d.profile == variant.profile and d.label("host") == variant.host_label
