"""Every job of the H100 device calls committed under docs/data (the ninth session's
d1-d3, the tenth's e1-e2, the eleventh's f1, the twelfth's g1, the thirteenth's h1;
docs/measurement.md §9.8-9.13, §16.4-16.7) and of the fourteenth's H200 call k1 (§9.14)
and H100 call m1 (§16.8), the fifteenth's H100 calls n1-n4 (§16.9) and the sixteenth's
H100 calls p1-p4 (§16.10), the seventeenth's H100 calls q1-q4 (§16.11) and H200 call q5 (§9.17),
the eighteenth's r1-r4 (§16.12), the twentieth's t1, t2 (§16.13), the twenty-first's
u1-u3 (§16.14), the twenty-second's v2 (§16.15), the twenty-third's w1 (§16.16) and the
twenty-fourth's x1 (§16.17), the twenty-fifth's y1 (§16.18) and the twenty-sixth's a1 (§16.19)
replayed on a CPU: `harness report` reaches each job's verdicts from its stored run,
against the H200 reference's baseline alone for the foreign jobs and the H100 baseline
each same-model job was judged against (the archive's ``baselines-then/``, or the
committed one). The figures the docs quote are checked by test_real_h100_acceptance.py
(ninth), test_real_h100_tenth.py (tenth), test_real_h100_eleventh.py (eleventh) and
test_real_h100_twelfth.py (twelfth) and test_real_h100_thirteenth.py (thirteenth)."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_archives import check_replay, unpack

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
D1, D2, D3 = "d1/{}/fc1619417a5c/sm90", "d2/{}/688a16534c5f/sm90", "d3/{}/3782823ef2aa/sm90"
E1, E2 = "e1/{}/07769aef7973/sm90", "e2/{}/5d57ec3cbb60/sm90"
F1 = "f1/{}/82ffd795e41b/sm90"
G1 = "g1/{}/82ffd795e41b/sm90"
H1, H1B = "h1/{}/82ffd795e41b/sm90", "h1/{}/a774eb468413/sm90"
K1 = "k1/{}/ac2af219046d/sm90"
M1 = "m1/{}/d1be0af4ca56/sm90"
N1 = "n1/{}/35605860ce94/sm90"
P = "p{}/{}/d102c2b5f461/sm90"
Q = "q{}/{}/f34c2994bb21/sm90"
R = "r{}/{}/ab980ea60968/sm90"
T = "t{}/{}/6de0b5d2b69a/sm90"
U = "u{}/{}/4854efc26822/sm90"
V = "v2/{}/1a6ecf6a5b9a/sm90"
W1 = "w1/{}/1768dae60946/sm90"
X1 = "x1/{}/890e885d3286/sm90"
Y1 = "y1/{}/890e885d3286/sm90"
A1 = "a1/{}/f380eb5c78ca/sm90"
B1 = "b1/{}/f380eb5c78ca/sm90"
C1 = "c1/{}/f380eb5c78ca/sm90"
#: archive -> its top folder and, per run: (judged against the H200 reference alone,
#: partial, exit code, rows)
ARCHIVES = {
    "h100-two-minute-2026-12-05.tar.gz": ("h100-2026-12-05", {
        D1.format("aa"): (False, False, 0, 380), D1.format("aa2"): (False, False, 0, 380),
        D1.format("foreign"): (True, False, 0, 380),
        D2.format("aa"): (False, False, 0, 380), D2.format("aa2"): (False, False, 0, 380),
        D2.format("foreign"): (True, False, 0, 380),
        D3.format("plantedjob3"): (False, True, 1, 280),
        D3.format("plantedjob"): (False, True, 1, 280)}),
    "h100-two-minute-2026-12-05-e.tar.gz": ("h100-2026-12-05-e", {
        E1.format("aa"): (False, False, 0, 380), E1.format("plantedjob3"): (False, True, 1, 280),
        E1.format("foreign"): (True, False, 0, 380),
        E2.format("aa"): (False, False, 0, 380), E2.format("aa2"): (False, False, 0, 380),
        E2.format("foreign"): (True, False, 0, 380)}),
    "h100-two-minute-2026-12-05-f.tar.gz": ("h100-2026-12-05-f", {
        F1.format("aa"): (False, False, 0, 380), F1.format("aa2"): (False, False, 0, 380),
        F1.format("plantedjob3"): (False, True, 1, 280)}),
    "h100-two-minute-2026-12-05-g.tar.gz": ("h100-2026-12-05-g", {
        G1.format("aa"): (False, False, 0, 380), G1.format("aa2"): (False, False, 0, 380),
        G1.format("foreign"): (True, False, 0, 380)}),
    "h100-2026-12-06-h.tar.gz": ("h100-2026-12-06-h", {
        H1.format("aa"): (False, False, 0, 380), H1.format("plantedjob"): (False, True, 1, 280),
        H1B.format("foreign"): (True, False, 0, 380), H1B.format("aa2"): (False, False, 0, 380),
        "h1/regressforeign/37385686142c/sm90": (True, False, 1, 380)}),
    # the fourteenth session's H200 (the reference model: its own baseline)
    "h200-2026-12-06-k.tar.gz": ("h200-2026-12-06-k", {
        K1.format("aa"): (False, False, 0, 380), K1.format("aa2"): (False, False, 0, 380),
        K1.format("plantedjob3"): (False, True, 1, 280),
        K1.format("plantedjob"): (False, True, 1, 280)}),
    # the fourteenth session's H100: same-model jobs against the H100's own rows
    "h100-2026-12-06-m.tar.gz": ("h100-2026-12-06-m", {
        M1.format("aa2"): (False, False, 0, 380), M1.format("aa3"): (False, False, 0, 380),
        "m1/regress/8ec9df0a2513/sm90": (False, False, 1, 380)}),
    # the fifteenth session's four fresh H100s: n1 same-model and foreign, n2-n4 foreign
    "h100-2026-12-06-n.tar.gz": ("h100-2026-12-06-n", {
        N1.format("aa"): (False, False, 0, 380), N1.format("aa2"): (False, False, 0, 380),
        N1.format("foreign"): (True, False, 0, 380),
        "n1/regressforeign/88505f4f8697/sm90": (True, False, 1, 380),
        "n2/foreign/b028f598f44f/sm90": (True, False, 0, 380),
        "n2/regressforeign/2c4702dcbef9/sm90": (True, False, 1, 380),
        "n3/foreign/b028f598f44f/sm90": (True, False, 1, 380),
        "n3/regressforeign/03bd3771955d/sm90": (True, False, 0, 380),
        "n4/regressforeign/d8b440c57117/sm90": (True, False, 1, 380)}),
    # the sixteenth session's four fresh H100s, all at d102c2b: p1, p2 foreign + regression,
    # p3 same-model fresh and warm + foreign, p4 same-model + the planted 3%
    "h100-2026-12-06-p.tar.gz": ("h100-2026-12-06-p", {
        P.format(1, "foreign"): (True, False, 0, 380),
        "p1/regressforeign/39fd1e66de85/sm90": (True, False, 1, 380),
        P.format(2, "foreign"): (True, False, 0, 380),
        "p2/regressforeign/38ecdf191dc9/sm90": (True, False, 1, 380),
        P.format(3, "aa"): (False, False, 0, 380), P.format(3, "aa2"): (False, False, 0, 380),
        P.format(3, "foreign"): (True, False, 0, 380),
        P.format(4, "aa"): (False, False, 0, 380),
        P.format(4, "plantedjob3"): (False, True, 1, 280)}),
    # the seventeenth session's four fresh H100s, all at f34c299 (the foreign A/B's rounds
    # all fresh): q1, q2 foreign + regression, q3 same-model fresh and warm + foreign,
    # q4 same-model + the planted 3%
    "h100-2026-12-06-q.tar.gz": ("h100-2026-12-06-q", {
        Q.format(1, "foreign"): (True, False, 0, 380),
        "q1/regressforeign/b1cc220f7f0e/sm90": (True, False, 1, 380),
        Q.format(2, "foreign"): (True, False, 0, 380),
        "q2/regressforeign/208095481ab7/sm90": (True, False, 1, 380),
        Q.format(3, "aa"): (False, False, 0, 380), Q.format(3, "aa2"): (False, False, 0, 380),
        Q.format(3, "foreign"): (True, False, 0, 380),
        Q.format(4, "aa"): (False, False, 0, 380),
        Q.format(4, "plantedjob3"): (False, True, 1, 280)}),
    # the seventeenth session's H200 at the same commit: the same-model job
    "h200-2026-12-06-q.tar.gz": ("h200-2026-12-06-q", {
        Q.format(5, "aa"): (False, False, 0, 380)}),
    # the eighteenth session's four fresh H100s, all at ab980ea (short benches pipelined
    # deeper, the same-model A/B started during ppl): r1, r2 foreign + regression, r3
    # same-model fresh and warm + the planted 3%, r4 same-model + the planted 5%
    "h100-2026-12-06-r.tar.gz": ("h100-2026-12-06-r", {
        R.format(1, "foreign"): (True, False, 0, 380),
        "r1/regressforeign/4799485a47e0/sm90": (True, False, 1, 380),
        R.format(2, "foreign"): (True, False, 0, 380),
        "r2/regressforeign/36388d2e4a85/sm90": (True, False, 1, 380),
        R.format(3, "aa"): (False, False, 0, 380), R.format(3, "aa2"): (False, False, 0, 380),
        R.format(3, "plantedjob3"): (False, True, 1, 280),
        R.format(4, "aa"): (False, False, 0, 380),
        R.format(4, "plantedjob"): (False, True, 1, 280)}),
    # the twentieth session's fresh H100 at 6de0b5d (gsplit at decode): t1 same-model,
    # foreign and the regression judged as foreign
    "h100-2026-12-06-t.tar.gz": ("h100-2026-12-06-t", {
        T.format(1, "aa"): (False, False, 0, 380), T.format(1, "foreign"): (True, False, 0, 380),
        "t1/regressforeign/ecada57a4211/sm90": (True, False, 1, 380),
        # t2 at 962674c: the two-sided screen's first GPU run (its one false SLOWER is
        # what 10e5eb8's direction rule reads SAME; the stored record keeps it SLOWER)
        "t2/foreign/962674c11f31/sm90": (True, False, 1, 380)}),
    # the twenty-first session's three fresh H100s at 4854efc (the direction rule): u1, u2
    # foreign + the regression, u2 the same-model job after its foreign job, u3 same-model
    # fresh and warm, then foreign
    "h100-2026-12-06-u.tar.gz": ("h100-2026-12-06-u", {
        U.format(1, "foreign"): (True, False, 0, 380),
        "u1/regressforeign/2591a4e3b13b/sm90": (True, False, 1, 380),
        U.format(2, "foreign"): (True, False, 0, 380), U.format(2, "aa3"): (False, False, 0, 380),
        "u2/regressforeign/9ab85caf6ca0/sm90": (True, False, 1, 380),
        U.format(3, "aa"): (False, False, 0, 380), U.format(3, "aa2"): (False, False, 0, 380),
        U.format(3, "foreign"): (True, False, 0, 380)}),
    # the twenty-second session's fresh H100 at 1a6ecf6: foreign fresh, foreign again with
    # the baseline commits' builds cached, the same-model job warm
    "h100-2026-12-06-v.tar.gz": ("h100-2026-12-06-v", {
        V.format("foreign"): (True, False, 0, 380), V.format("foreign2"): (True, False, 0, 380),
        V.format("aa3"): (False, False, 0, 380)}),
    # the twenty-third session's fresh H100 at 1768dae (the prestart): as v2
    "h100-2026-12-06-w.tar.gz": ("h100-2026-12-06-w", {
        W1.format("foreign"): (True, False, 0, 380), W1.format("foreign2"): (True, False, 0, 380),
        W1.format("aa3"): (False, False, 0, 380)}),
    # the twenty-fourth session's fresh H100 at 890e885 (the fused-row fix): as w1, then
    # the regression judged as foreign
    "h100-2026-12-06-x.tar.gz": ("h100-2026-12-06-x", {
        X1.format("foreign"): (True, False, 0, 380), X1.format("foreign2"): (True, False, 0, 380),
        X1.format("aa3"): (False, False, 0, 380),
        "x1/regressforeign/0afcb3933adf/sm90": (True, False, 1, 380)}),
    # the twenty-fifth session's second fresh H100 at 890e885: foreign, then the regression
    "h100-2026-12-07-y.tar.gz": ("h100-2026-12-07-y", {
        Y1.format("foreign"): (True, False, 0, 380),
        "y1/regressforeign/f9c4e1c79d8e/sm90": (True, False, 1, 380)}),
    # the twenty-sixth session's fresh H100 at f380eb5 (the held extra-round benches): as w1
    "h100-2026-12-07-a.tar.gz": ("h100-2026-12-07-a", {
        A1.format("foreign"): (True, False, 0, 380), A1.format("foreign2"): (True, False, 0, 380),
        A1.format("aa3"): (False, False, 0, 380)}),
    # the twenty-eighth session's second fresh H100 at f380eb5: as a1
    "h100-2026-12-07-b.tar.gz": ("h100-2026-12-07-b", {
        B1.format("foreign"): (True, False, 0, 380), B1.format("foreign2"): (True, False, 0, 380),
        B1.format("aa3"): (False, False, 0, 380)}),
    # the twenty-ninth session's third fresh H100 at f380eb5: as a1, plus the warm foreign
    # job with the factor at 5 samples a row
    "h100-2026-12-07-c.tar.gz": ("h100-2026-12-07-c", {
        C1.format("foreign"): (True, False, 0, 380), C1.format("foreign2"): (True, False, 0, 380),
        C1.format("foreign5"): (True, False, 0, 380), C1.format("aa3"): (False, False, 0, 380)}),
    # the twenty-ninth session's fourth and fifth fresh H100s at f380eb5, the factor at 5
    # samples a row: foreign, then the regression judged as foreign
    "h100-2026-12-07-d.tar.gz": ("h100-2026-12-07-d", {
        "d1/foreign/f380eb5c78ca/sm90": (True, False, 0, 380),
        "d1/regressforeign/c71d45d7153f/sm90": (True, False, 1, 380),
        "e1/foreign/f380eb5c78ca/sm90": (True, False, 0, 380),
        "e1/regressforeign/5063c3422cb7/sm90": (True, False, 1, 380)}),
    # and a sixth: the same-model job alone, fresh
    "h100-2026-12-07-f.tar.gz": ("h100-2026-12-07-f", {
        "f1/aa/f380eb5c78ca/sm90": (False, False, 0, 380)}),
    # the thirtieth session's two fresh H100s at f380eb5, the factor at 5 samples a row:
    # foreign, then the planted 5% of fp16_cache judged as foreign (production alone)
    "h100-2026-12-07-g.tar.gz": ("h100-2026-12-07-g", {
        "g1/foreign/f380eb5c78ca/sm90": (True, False, 0, 380),
        "g1/foreignplanted/f380eb5c78ca/sm90": (True, False, 1, 280),
        "h1/foreign/f380eb5c78ca/sm90": (True, False, 0, 380),
        "h1/foreignplanted/f380eb5c78ca/sm90": (True, False, 1, 280)}),
    # the thirty-third session's four fresh H100s at f380eb5: on i1 the foreign job fresh
    # and warm, then the same-model job warm; on j1, k1 and m1 the same-model job alone, fresh
    "h100-2026-12-07-i.tar.gz": ("h100-2026-12-07-i", {
        "i1/foreign/f380eb5c78ca/sm90": (True, False, 0, 380),
        "i1/foreign2/f380eb5c78ca/sm90": (True, False, 0, 380),
        "i1/aa3/f380eb5c78ca/sm90": (False, False, 0, 380),
        "j1/aa/f380eb5c78ca/sm90": (False, False, 0, 380),
        "k1/aa/f380eb5c78ca/sm90": (False, False, 0, 380),
        "m1/aa/f380eb5c78ca/sm90": (False, False, 0, 380)}),
    # the thirty-sixth session's fresh H100 at f380eb5: the same-model job alone
    "h100-2026-12-08-n.tar.gz": ("h100-2026-12-08-n", {
        "n1/aa/f380eb5c78ca/sm90": (False, False, 0, 380)}),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """Each archive unpacked beside its baselines (``device_archives.unpack``)."""
    return {name: unpack(DATA / name, tmp_path_factory.mktemp(top))
            for name, (top, _) in ARCHIVES.items()}


@pytest.mark.parametrize("archive, run", [(name, run) for name, (_, runs) in ARCHIVES.items()
                                          for run in sorted(runs)])
def test_report_reaches_each_jobs_verdicts(roots, archive, run, capsys, tmp_path):
    top, runs = ARCHIVES[archive]
    root = roots[archive]
    check_replay(root, root / top / run, runs[run], tmp_path / "rep", capsys)
