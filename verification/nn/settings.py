"""Every tuning knob of the network verifier's search in one place (as nnenum's ``Settings``).

:class:`SearchSettings` is a frozen dataclass: one field per knob, each with what it tunes and
where its value came from. :class:`~mi_certify.verification.nn.nn_verify.VerifyOptions` holds
one (``opts.search``, :data:`DEFAULT_SEARCH` unless a caller replaces it). The values change
which boxes the search explores and when, never what a verdict means: every PROVED rests on
sound bounds (or an exact LP / Marabou / Z3 answer) whatever the knobs say, and every VIOLATED
on a replayed witness. What a verdict means (the replay tolerance, the outward rounding of
bounds) is not a knob: it stays with the code it defines (``nn_verify.TOLERANCE``,
``bounds.INFLATION``).

"Measured" below refers to docs/verification.md ("Measured": ACAS Xu anchors, 2 cores, 60 s
per query); "chosen" means the value was set when the feature came in, without a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SEARCH", "SearchSettings"]


@dataclass(frozen=True)
class SearchSettings:
    """Tuning knobs of :func:`~mi_certify.verification.nn.nn_verify.decide` (times in seconds,
    shares of a time budget in [0, 1])."""

    # -- falsification before the search (nn_verify._sample_witness, _pgd_witness) --
    #: Seeded uniform random points tried per distinct input box before any search (docs/verification.md,
    #: Procedure 2; chosen). Changing it changes which witness a `sat` query reports.
    sample_points: int = 256
    #: Replays (onnxruntime runs) of those points per disjunct at most (chosen).
    sample_replays: int = 5
    #: Share of a query's timeout the gradient search (PGD, Madry et al., ICLR 2018) before branch and
    #: bound may take (docs/verification.md, Procedure 2: "at most 10 % of the budget"; chosen).
    pgd_share: float = 0.1
    #: Replays of the PGD end points per disjunct at most, before branch and bound (chosen).
    pgd_replays: int = 5

    # -- input splitting (verification/nn/input_split.py, nn_verify._branch_and_bound) --
    #: Boxes per vectorised bounding pass at most (see :func:`~.input_split.batch_size`); a batch of
    #: 256 ACAS Xu boxes costs 40 ms with forward bounds, 300 ms with CROWN for every node (measured).
    batch_boxes: int = 256
    #: Float64 elements the largest backward-pass array (boxes × 2·width × width) may hold: wide
    #: networks get fewer boxes per pass (8e6 × 8 bytes = 64 MB; chosen).
    batch_elements: int = 8_000_000
    #: Boxes per pass at least, however wide the network (chosen).
    batch_min_boxes: int = 4
    #: Boxes taken off the heap per branch-and-bound round: this many batches' worth of children
    #: in the smart phase's cheap pass, each box having 2·n_inputs halves, i.e.
    #: ``batch_size · cheap_pass_batches // (2 · n_inputs)`` boxes (~200 for ACAS Xu; chosen).
    cheap_pass_batches: int = 8
    #: Share of the branch-and-bound time the smart split (2n halves bounded cheaply, one-step
    #: look-ahead) has before the influence split goes on from its open boxes. The two rules
    #: complement each other: smart alone leaves 4_1/p3 open, influence alone 1_1/p2 (measured).
    first_share: float = 0.3
    #: Weight of a split's better half in the smart score ``min(halves) + w · max(halves)``: a tie
    #: breaker towards splits that close one half outright (chosen).
    smart_tiebreak: float = 1e-3
    #: Disjuncts of at most this many rows also get the average of every pair of rows as an
    #: implied row (all rows' average always); m² / 2 rows beyond it cost more than they close (chosen).
    pair_rows_max: int = 6
    #: Candidate witnesses (box centres, bound-minimising corners, PGD points) replayed per
    #: disjunct at most during the search; each costs an onnxruntime run (chosen).
    max_replays: int = 50
    #: Branch-and-bound rounds between gradient searches (docs/verification.md: "every 8th batch
    #: runs PGD"; chosen).
    pgd_every: int = 8
    #: Open boxes (most promising first) whose centres start that gradient search (chosen).
    pgd_box_starts: int = 16

    # -- LP oracle for CROWN's multipliers (opt-in: VerifyOptions.lp_hints; verification/nn/lp_relax.py) --
    #: Seconds HiGHS may take for one box's triangle LP (measured: 18 ms a box on 3_3/p2).
    lp_time_limit: float = 1.0
    #: Seconds before the deadline below which no box LP is started (chosen).
    lp_min_left: float = 0.05
    #: Whether a box whose parent's LP multipliers are inherited gets an LP of its own too (chosen).
    lp_every_level: bool = True

    # -- exact leaves (VerifyOptions.lp_leaves; verification/nn/lp_split.py) --
    #: Input halvings (Σ_i log2(region width_i / box width_i)) after which an open box goes to the
    #: ReLU-split LP instead of being split again: 14 measured best on 3_3/p2 and 4_2/p2 among 10–20
    #: (docs/verification.md, "Leaf depth").
    leaf_depth: int = 14
    #: An open box at least ``leaf_unstable_depth`` halvings deep whose node bounds leave at most this many
    #: ReLUs unstable is a leaf too (0: depth alone), on networks that get no exact confirmation: its LPs
    #: are small and few. Measured on ACAS Xu 3_3/p2 and 4_2/p2 (2026-12-08, docs/verification.md "Children's
    #: bounds clipped to their parent's, and leaves by unstable count"): 30-40 from 11-12 halvings gain
    #: alike, 10-20 change little (few boxes qualify), 50-64 take thousands more LPs.
    leaf_unstable: int = 30
    #: Halvings from which ``leaf_unstable`` applies (measured with it: 11 and 12 alike, 10 no better).
    leaf_unstable_depth: int = 12
    #: LPs one leaf may solve before it is given up (left open) (chosen).
    leaf_max_lps: int = 5000
    #: Seconds HiGHS may take for one subdomain LP of a leaf (chosen).
    leaf_lp_time_limit: float = 1.0
    #: Leaves handed to a worker process at a time, in box order (chosen).
    leaf_chunk: int = 32
    # -- LP probes (nn_verify._probes): a box of probe_every, 2 probe_every … <= probe_max_depth halvings
    # whose node bounds leave at most probe_unstable ReLUs unstable goes to the leaves with a budget of
    # probe_max_lps LPs; when they run out the box comes back to input splitting (once per lineage) --
    #: Unstable ReLUs a probed box may have at most (measured: ACAS Xu 4_1/p3's boxes at 4 halvings have
    #: 31-56 and close with at most 15 LPs each; 3_3/p2's and 4_2/p2's 118-231 (not probed)).
    probe_unstable: int = 64
    #: LPs a probe may take (0: no probes). 16 closed 4_1/p3's 19 boxes at 4 halvings (at most 15 each)
    #: and 11 of 13 (3_3/p2), 47 of 49 (4_2/p2) at 8 halvings (measured).
    probe_max_lps: int = 16
    #: Halvings between probe depths (chosen).
    probe_every: int = 4
    #: Deepest probe depth: 4 (measured, docs/verification.md "LP probes": probes at 8 halvings too cost
    #: random 80-120-ReLU networks 2-5x their time and gained nothing on ACAS Xu; at 12, 3_3/p2 took longer).
    probe_max_depth: int = 4

    # -- Marabou on the boxes left open (nn_verify._marabou_stage) --
    #: Open boxes are handed to Marabou only when there are at most this many; with more, branch
    #: and bound keeps the whole budget (docs/verification.md, Procedure 4; chosen).
    marabou_max_boxes: int = 64
    #: Share of the time left that the CROWN node bounds for Marabou's variables may take (chosen).
    marabou_bounds_share: float = 0.2
    #: Seconds left below which Marabou is not started (the query stays UNKNOWN) (chosen).
    marabou_min_left: float = 0.5
    #: Seconds Marabou gets per open box at least (chosen).
    marabou_min_box_time: float = 1.0
    #: Branch and bound hands its open boxes to Marabou only when each would get at least
    #: max(marabou_min_box_time, this × the network's ReLUs) seconds of the time left (after the
    #: node bounds' share): with less, a box goes untried or times out, the query stays UNKNOWN
    #: whatever the others give, and branch and bound, which was closing boxes, loses its time.
    #: Measured: tllverifybench N = 64 7_3 (16,380 ReLUs), Marabou closed 0 of 62 boxes at 0.4 s a
    #: box in 24 s, where branch and bound alone proved the query in 45 s (chosen).
    marabou_box_time_per_relu: float = 1e-3

    # -- exact confirmation of a PROVED (nn_verify._confirm_partitions) --
    #: Networks up to this many ReLUs get an exact confirmation of every PROVED (docs/verification.md,
    #: Procedure 5; the reference controller's P1–P3 confirm in ≈ 15–40 s, measured).
    z3_confirm_max_relus: int = 64
    #: Processes for the Z3 confirmation (both cores of the reference machine).
    z3_workers: int = 2
    #: Share of the confirmation budget exact symbolic bounds (exact_bounds.py) may take to close
    #: boxes before Z3 is called (chosen; the reference's 28 P2 boxes take 0.2 s of it).
    exact_bound_share: float = 0.5
    #: Bisections by exact bounds below a search box (or a piece no search box starts at) before Z3
    #: takes what is open (chosen: at most 2**9 - 1 bound evaluations per such piece; about 2 ms each
    #: on the reference's 32 ReLUs).
    exact_max_depth: int = 8
    #: Boxes are bisected until there are this many tasks per Z3 worker (chosen).
    z3_tasks_per_worker: int = 4

    # -- output domain (network.verify_spec) --
    #: Seeded random points whose outputs show how tight the proved output bounds are (their
    #: sampled_min / sampled_max are in the hashed verification.json: changing it changes bundles).
    output_samples: int = 4096


#: The settings every query uses unless its VerifyOptions carries others.
DEFAULT_SEARCH = SearchSettings()
