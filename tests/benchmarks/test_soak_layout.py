"""benchmarks/soak.py --layout servers: the specs it splits the pools example into -- the front's
dials every endpoint, and each endpoint's server serves that endpoint alone, where the front
dials it."""

from __future__ import annotations

from conftest import EXAMPLES

from pdtrt.enums import Phase
from pdtrt.spec.load import load_spec
from tests.benchmarks.conftest import load_script

soak = load_script("soak")


def test_each_endpoint_gets_a_server_of_its_own_where_the_front_dials_it(tmp_path):
    pools = EXAMPLES / "reference-cpu-pools.yaml"
    front_path, per = soak.split_specs(pools, tmp_path)
    front = load_spec(front_path)
    dialed = {e.model: e.url for p in Phase for e in front.pool_endpoints(p)}
    assert sorted(dialed) == sorted(soak.pool_models(pools)) == sorted(per)
    assert all(dialed.values()) and len(set(dialed.values())) == len(dialed)  # all remote
    for model, path in per.items():
        spec = load_spec(path)
        served = [e for p in Phase for e in spec.pool_endpoints(p) if e.url]
        assert [(e.model, e.url) for e in served] == [(model, dialed[model])]
        assert spec.name == front.name  # one engines directory for the whole fleet
