// sla_monitor: per-action SLA monitor, hand-written, parameterised Verilog-2001.
//
// Normative semantics: docs/runtime.md, section "SLA monitor"; the Python reference is
// mi_certify.runtime.sla.CycleSlaMonitor (cycle units) on top of SlaMonitor. Both are
// compared cycle by cycle in co-simulation (mi_certify.verification.cosim).
//
// Measurement (one per request):
//   latency   clock cycles from the rising edge that samples req_start to the rising
//             edge that samples req_done (done one cycle after start = 1 cycle). The
//             counter saturates at 2^CYC_W - 1, which counts as +infinity (fail closed).
//   accuracy  acc_loss, unsigned fixed point in units of 1/ACC_SCALE percentage points
//             (ACC_SCALE = 1000 in the generated wrapper: 0.001 pp), sampled with
//             req_done. acc_unknown = 1 means missing / not measured = +infinity.
//             The engine rounds up (ceil) and clamps negative losses to 0, so the
//             monitor never judges a loss smaller than the real one.
//   action    req_action, sampled with req_start: the action the request runs under.
//
// Window and verdict (docs/runtime.md 2-4): the last <= WINDOW measurements of one
// action; a measurement of another action empties the window first. Statistic
// (LAT_STAT / ACC_STAT): 0 = mean, 1..99 = nearest-rank percentile pNN, 100 = max
// (max is the p100 nearest rank). max/pNN keep a shift register of exceed bits
// (value > limit) and their count c: violation <=> c >= n - ceil(NN*n/100) + 1.
// mean keeps ex = sum - limit * n of the window, a running signed difference: violation <=>
// ex > 0 (sum > limit * n, exact integers), or any +infinity in the window. The limit is the
// same for every measurement of a window (a measurement of another action empties it), so ex
// moves by additions only: no multiplier on the verdict path. Equality is compliant. An action whose JUDGED bit is 0 is
// never in violation on that metric.
//
// Timing (docs/runtime.md 5): the verdict of the request completed at edge t is on
// violation / lat_violation / acc_violation after edge t (registered) and holds until
// the next verdict; verdict_valid pulses for that one cycle. Connect violation to the
// FSM's sla_violation and step the FSM once per request, after the verdict.
//
// Protocol: req_start while a request is in flight abandons it: the abandoned request
// is a measurement with latency and accuracy +infinity (fail closed). req_done with no
// request in flight is ignored and pulses proto_error. A req_action >= N_ACTIONS is
// judged against limit 0 on both metrics (always a violation) and pulses proto_error.
//
// Reset (docs/runtime.md 6): empty window, no request in flight, no violation.
// RST_ASYNC = 0: synchronous; 1: asynchronous assert, synchronous release is the
// integrator's reset synchroniser. RST_ACTIVE_LOW = 1: rst is active low.
//
// Latency of the verdict: 1 cycle after req_done. No initial blocks; every register
// is reset.
`timescale 1ns / 1ps

module sla_monitor #(
    parameter integer N_ACTIONS      = 4,     // tokens 0 .. N_ACTIONS-1
    parameter integer ACTION_W       = 2,     // width of req_action (>= 1)
    parameter integer WINDOW         = 1,     // window length N >= 1 (requests)
    parameter integer CYC_W          = 32,    // latency counter width (2 .. 32)
    parameter integer ACC_W          = 17,    // acc_loss width (1 .. 32)
    parameter integer LAT_STAT       = 100,   // 0 mean, 1..99 pNN, 100 max
    parameter integer ACC_STAT       = 100,   // 0 mean, 1..99 pNN, 100 max
    // per action a: limit at [a*W +: W], judged at bit a (0 = never judged)
    parameter [N_ACTIONS*CYC_W-1:0] LAT_LIMIT  = {N_ACTIONS*CYC_W{1'b0}},
    parameter [N_ACTIONS-1:0]       LAT_JUDGED = {N_ACTIONS{1'b0}},
    parameter [N_ACTIONS*ACC_W-1:0] ACC_LIMIT  = {N_ACTIONS*ACC_W{1'b0}},
    parameter [N_ACTIONS-1:0]       ACC_JUDGED = {N_ACTIONS{1'b0}},
    parameter integer RST_ASYNC      = 0,
    parameter integer RST_ACTIVE_LOW = 0,
    parameter integer NW             = 5      // width of samples: >= clog2(WINDOW + 1)
) (
    input  wire                clk,
    input  wire                rst,
    input  wire                req_start,      // a request starts (1-cycle strobe)
    input  wire [ACTION_W-1:0] req_action,     // its action token, sampled with req_start
    input  wire                req_done,       // the request in flight is done (1-cycle strobe)
    input  wire [ACC_W-1:0]    acc_loss,       // its accuracy loss, 1/ACC_SCALE pp, with req_done
    input  wire                acc_unknown,    // accuracy loss missing: +infinity
    output reg                 violation,      // -> FSM sla_violation (registered)
    output wire                lat_violation,  // latency statistic > limit (registered)
    output wire                acc_violation,  // accuracy statistic > limit (registered)
    output reg                 verdict_valid,  // a new verdict this cycle (registered pulse)
    output wire [NW-1:0]       samples,        // measurements in the window, 0 .. WINDOW
    output reg                 busy,           // a request is in flight
    output reg                 proto_error     // done without start, or an unknown action (pulse)
);

    // Parameter check: an illegal combination fails elaboration here (the instantiated module
    // does not exist) instead of simulating or synthesising something other than documented.
    generate
        if (N_ACTIONS < 1 || ACTION_W < 1 || WINDOW < 1 || CYC_W < 2 || CYC_W > 32 || ACC_W < 1 || ACC_W > 32
            || LAT_STAT < 0 || LAT_STAT > 100 || ACC_STAT < 0 || ACC_STAT > 100 || NW < 1 || NW > 31
            || (NW < 31 && (1 << NW) <= WINDOW)                   // samples counts 0 .. WINDOW
            || (ACTION_W < 31 && (1 << ACTION_W) < N_ACTIONS))     // req_action holds every token
        begin : illegal_parameters
            sla_monitor_illegal_parameters_see_the_header_comment u_illegal ();
        end
    endgenerate

    wire rst_hi = (RST_ACTIVE_LOW != 0) ? ~rst : rst;

    localparam [CYC_W-1:0] CYC_INF = {CYC_W{1'b1}};

    // ---- latency counter and request in flight ------------------------------
    reg  [CYC_W-1:0]    cnt;          // cycles since req_start (1 at the next edge)
    reg  [ACTION_W-1:0] act;          // action of the request in flight
    reg  [ACTION_W-1:0] win_act;      // action of the window's measurements
    reg                 win_any;      // the window holds measurements
    // Kept beside the state they are a function of, so that a push's verdict is a function of
    // registers and the strobes through a few gates (docs/hdl-cosim.md, "Timing paths"):
    reg                 same;         // == win_any & (act == win_act): a push keeps the window
    reg                 lat_gt;       // == (cnt > lat_limit), the limit of act
    reg                 lat_sat;      // == (cnt == CYC_INF)

    wire done_ok   = req_done & busy;                    // a measured request
    wire abandoned = req_start & busy & ~req_done;       // restarted before done: +infinity
    wire push      = done_ok | abandoned;
    wire act_ok    = ({{(32 - ACTION_W){1'b0}}, act} < N_ACTIONS);
    wire clear     = ~same;                              // another action empties the window

    wire lat_inf   = abandoned | lat_sat;
    wire acc_inf   = abandoned | acc_unknown;

    // limits of an action (limit 0, judged, for an unknown action): of act, and of req_action
    reg [CYC_W-1:0] lat_limit, start_lat_limit;
    reg [ACC_W-1:0] acc_limit;
    reg             lat_judged;
    reg             acc_judged;
    integer a;
    always @(*) begin
        lat_limit       = {CYC_W{1'b0}};
        start_lat_limit = {CYC_W{1'b0}};
        acc_limit       = {ACC_W{1'b0}};
        lat_judged      = 1'b1;
        acc_judged      = 1'b1;
        for (a = 0; a < N_ACTIONS; a = a + 1) begin
            if ({{(32 - ACTION_W){1'b0}}, act} == a) begin
                lat_limit  = LAT_LIMIT[a*CYC_W +: CYC_W];
                acc_limit  = ACC_LIMIT[a*ACC_W +: ACC_W];
                lat_judged = LAT_JUDGED[a];
                acc_judged = ACC_JUDGED[a];
            end
            if ({{(32 - ACTION_W){1'b0}}, req_action} == a) begin
                start_lat_limit = LAT_LIMIT[a*CYC_W +: CYC_W];
            end
        end
    end

    wire lat_next, acc_next;
    wire [NW-1:0] acc_samples;

    sla_monitor_window #(.WINDOW(WINDOW), .VAL_W(CYC_W), .STAT(LAT_STAT), .NW(NW), .RST_ASYNC(RST_ASYNC))
    u_lat (.clk(clk), .rst_hi(rst_hi), .push(push), .clear(clear), .val(cnt), .inf(lat_inf), .gt(lat_gt),
           .limit(lat_limit), .judged(lat_judged), .violate_next(lat_next), .violate(lat_violation),
           .samples(samples));

    sla_monitor_window #(.WINDOW(WINDOW), .VAL_W(ACC_W), .STAT(ACC_STAT), .NW(NW), .RST_ASYNC(RST_ASYNC))
    u_acc (.clk(clk), .rst_hi(rst_hi), .push(push), .clear(clear), .val(acc_loss), .inf(acc_inf),
           .gt(acc_loss > acc_limit), .limit(acc_limit), .judged(acc_judged), .violate_next(acc_next),
           .violate(acc_violation), .samples(acc_samples));

    // ---- next state ------------------------------------------------------------
    reg                 n_busy;
    reg [CYC_W-1:0]     n_cnt;
    reg [ACTION_W-1:0]  n_act;
    reg [ACTION_W-1:0]  n_win_act;
    reg                 n_win_any;
    reg                 n_violation;
    reg                 n_proto_error;
    reg                 n_same;
    reg                 n_lat_gt;
    reg                 n_lat_sat;

    always @(*) begin
        n_busy        = busy;
        n_cnt         = cnt;
        n_lat_gt      = lat_gt;
        n_lat_sat     = lat_sat;
        if (busy && !lat_sat) begin                      // cnt + 1 > limit <=> cnt >= limit
            n_cnt     = cnt + {{(CYC_W - 1){1'b0}}, 1'b1};
            n_lat_gt  = lat_gt | (cnt == lat_limit);
            n_lat_sat = (cnt == CYC_INF - {{(CYC_W - 1){1'b0}}, 1'b1});
        end
        n_act         = act;
        n_win_act     = win_act;
        n_win_any     = win_any;
        n_violation   = violation;
        n_proto_error = req_done & ~busy;
        if (push) begin
            n_win_act     = act;
            n_win_any     = 1'b1;
            n_violation   = lat_next | acc_next;
            n_proto_error = n_proto_error | ~act_ok;
            n_busy        = 1'b0;
        end
        if (req_start) begin
            n_busy    = 1'b1;
            n_cnt     = {{(CYC_W - 1){1'b0}}, 1'b1};
            n_act     = req_action;
            n_lat_gt  = (start_lat_limit == {CYC_W{1'b0}});  // 1 > limit
            n_lat_sat = 1'b0;                                // CYC_W >= 2: 1 < CYC_INF
        end
        n_same = n_win_any & (n_act == n_win_act);
    end

    // ---- registers (all reset to zero) ---------------------------------------------
    localparam integer QW = CYC_W + 2 * ACTION_W + 8;
    wire [QW-1:0] q;
    sla_monitor_reg #(.W(QW), .RST_ASYNC(RST_ASYNC)) u_q (
        .clk(clk), .rst_hi(rst_hi),
        .d({n_busy, n_cnt, n_act, n_win_act, n_win_any, n_violation, push, n_proto_error, n_same, n_lat_gt,
            n_lat_sat}),
        .q(q));
    always @(*) begin
        {busy, cnt, act, win_act, win_any, violation, verdict_valid, proto_error, same, lat_gt, lat_sat} = q;
    end

    // acc_samples equals samples (both windows are pushed and cleared together)
    wire unused_ok = &{1'b0, acc_samples};

endmodule


/* verilator lint_off DECLFILENAME */
// One metric's window: n <= WINDOW values of one action, its statistic against limit. Each push's
// verdict is computed from registers kept for the next push (below) and the measurement through one
// comparison (max / pNN) or one adder (mean); the values it equals are in the comments.
module sla_monitor_window #(
    parameter integer WINDOW    = 1,
    parameter integer VAL_W     = 8,
    parameter integer STAT      = 100,   // 0 mean, 1..100 pNN (100 = max)
    parameter integer NW        = 5,
    parameter integer RST_ASYNC = 0
) (
    input  wire             clk,
    input  wire             rst_hi,
    input  wire             push,          // add a measurement
    input  wire             clear,         // ... after emptying the window
    input  wire [VAL_W-1:0] val,
    input  wire             inf,           // the measurement is +infinity
    input  wire             gt,            // val > limit (max / pNN)
    input  wire [VAL_W-1:0] limit,
    input  wire             judged,
    output reg              violate_next,  // verdict after this push (combinational)
    output wire             violate,       // verdict of the last push (registered)
    output wire [NW-1:0]    samples        // n (registered)
);

    // nearest-rank threshold: violation <=> c >= n - ceil(STAT*n/100) + 1
    function integer rank_threshold;
        input [31:0] n;   // a count, 0 .. WINDOW (pyverilog 1.3 reads no "input integer")
        begin
            rank_threshold = n - (STAT * n + 99) / 100 + 1;
        end
    endfunction

    reg [NW-1:0] n0, n1;
    reg [NW-1:0] one;

    generate
        if (STAT == 0) begin : g_mean
            // ex = sum - limit * n of the window: |ex| <= WINDOW * (2^VAL_W - 1) < 2^(VAL_W + NW), so
            // EX_W bits hold it in two's complement. Kept for the next push (without clear):
            //   bm = ex - oldest - (n == WINDOW ? 0 : limit) - 1   (the push gives ex1 = bm + new + 1)
            //   x  = next oldest + (n + 1 >= WINDOW ? 0 : limit)  (what bm loses at that push)
            // both modulo 2^EX_W: only ex1 - 1 = bm + new, which fits, is read as a signed value.
            localparam integer EX_W = VAL_W + NW + 1;
            localparam integer QW   = NW + WINDOW * VAL_W + WINDOW + NW + 2 * EX_W + 1;
            localparam integer NEXT_OLD = (WINDOW >= 2) ? (WINDOW - 1) * VAL_W - 1 : VAL_W - 1;  // msb of the slot
            wire [QW-1:0]           q;
            wire [NW-1:0]           n_q;
            wire [WINDOW*VAL_W-1:0] vals_q;
            wire [WINDOW-1:0]       infs_q;
            wire [NW-1:0]           ninf_q;
            wire [EX_W-1:0]         bm_q, x_q;
            wire                    v_q;
            assign {n_q, vals_q, infs_q, ninf_q, bm_q, x_q, v_q} = q;

            reg [WINDOW*VAL_W-1:0] vals0, vals1, val_ext;
            reg [WINDOW-1:0]       infs0, infs1, inf_ext;
            reg [NW-1:0]           ninf0, ninf1, old_inf, new_inf;
            reg [EX_W-1:0]         bm0, x0, bm1, x1, new_val, val_w, lim_ext, next_old, s, cs_sum, cs_carry;
            reg                    full2;
            integer                k;

            always @(*) begin
                one = {NW{1'b0}};
                one[0] = 1'b1;
                n0 = clear ? {NW{1'b0}} : n_q;
                vals0 = clear ? {WINDOW*VAL_W{1'b0}} : vals_q;
                infs0 = clear ? {WINDOW{1'b0}} : infs_q;
                ninf0 = clear ? {NW{1'b0}} : ninf_q;
                lim_ext = {EX_W{1'b0}};
                lim_ext[VAL_W-1:0] = limit;
                // an empty window: ex = 0, no oldest, n = 0 < WINDOW: bm = -limit - 1 = ~limit,
                // x = (WINDOW == 1 ? the new value, unused : 0 + limit, as n + 1 = 1 < WINDOW)
                bm0 = clear ? ~lim_ext : bm_q;
                x0 = clear ? lim_ext : x_q;
                new_val = {EX_W{1'b0}};
                new_val[VAL_W-1:0] = inf ? {VAL_W{1'b0}} : val;
                old_inf = {NW{1'b0}};
                old_inf[0] = infs0[WINDOW-1];
                new_inf = {NW{1'b0}};
                new_inf[0] = inf;
                val_ext = {WINDOW*VAL_W{1'b0}};
                val_ext[VAL_W-1:0] = new_val[VAL_W-1:0];
                inf_ext = {WINDOW{1'b0}};
                inf_ext[0] = inf;
                vals1 = (vals0 << VAL_W) | val_ext;
                infs1 = (infs0 << 1) | inf_ext;
                ninf1 = ninf0 - old_inf + new_inf;
                n1 = (n0 == WINDOW[NW-1:0]) ? n0 : n0 + one;
                // a +infinity in the window after this push: inf, or one that stays (ninf0 counts the oldest's)
                // ex1 - 1 = bm0 + val when the value is finite: ex1 > 0 <=> its sign bit is 0 (the value is
                // added ungated: with inf the verdict is a violation whatever the sum)
                val_w = {EX_W{1'b0}};
                val_w[VAL_W-1:0] = val;
                s = bm0 + val_w;
                violate_next = judged & (inf | (ninf0 != old_inf) | ~s[EX_W-1]);
                // bm1 = ex1 - oldest1 - limit term - 1 = bm0 + new - x0: a carry-save step, then one adder
                // (- x0 = ~x0 + 1, the + 1 in the carry word's free bit 0)
                cs_sum = bm0 ^ new_val ^ ~x0;
                cs_carry = ((bm0 & new_val) | (bm0 & ~x0) | (new_val & ~x0)) << 1;
                cs_carry[0] = 1'b1;
                bm1 = (WINDOW == 1) ? bm0 : cs_sum + cs_carry;
                // x1 = the oldest after the next push + its limit term; n1 + 1 >= WINDOW: no limit term
                next_old = {EX_W{1'b0}};
                next_old[VAL_W-1:0] = vals1[NEXT_OLD -: VAL_W];   // WINDOW == 1: unused (bm1 = bm0)
                // min(n1 + 1, WINDOW) == WINDOW <=> n0 + 2 >= WINDOW (n0 = 0 after clear): a table on n0
                full2 = 1'b1;
                for (k = 0; k < WINDOW; k = k + 1) begin
                    if (n0 == k[NW-1:0]) full2 = (k + 2 >= WINDOW);
                end
                x1 = next_old + (full2 ? {EX_W{1'b0}} : lim_ext);
            end

            sla_monitor_reg #(.W(QW), .RST_ASYNC(RST_ASYNC)) u_q (
                .clk(clk), .rst_hi(rst_hi),
                .d(push ? {n1, vals1, infs1, ninf1, bm1, x1, violate_next} : q), .q(q));
            assign violate = v_q;
            assign samples = n_q;
            wire unused_mean = &{1'b0, gt};
        end else begin : g_rank
            // kept for the next push (without clear): d = cb - thr, the slack of that push's verdict, where
            // cb = c - e[WINDOW-1] (the count once the oldest leaves) and thr = the rank threshold at
            // min(n + 1, WINDOW) (n after that push); signed, -WINDOW <= d < WINDOW: NW + 1 bits.
            // Consecutive thresholds differ by 0 or 1 (ceil(p (k + 1)) - ceil(p k) is 0 or 1 for p <= 1).
            // dthr = thr(min(n + 2, WINDOW)) - thr(min(n + 1, WINDOW)), kept with them (a table on n).
            localparam integer QW = NW + WINDOW + NW + 3;
            wire [QW-1:0]     q;
            wire [NW-1:0]     n_q;
            wire [WINDOW-1:0] e_q;
            wire [NW:0]       d_q;
            wire              dthr_q, v_q;
            assign {n_q, e_q, d_q, dthr_q, v_q} = q;

            reg [WINDOW-1:0] e0, e1, e_ext;
            integer          k;
            reg [NW:0]       d0, d1, delta;
            reg              left, dthr0, dthr1;
            wire exceed = inf | gt;

            always @(*) begin
                one = {NW{1'b0}};
                one[0] = 1'b1;
                n0 = clear ? {NW{1'b0}} : n_q;
                e0 = clear ? {WINDOW{1'b0}} : e_q;
                d0 = clear ? {(NW + 1){1'b1}} : d_q;     // an empty window: cb = 0, thr(1) = 1 (STAT 1 .. 100)
                // c1 = c0 - oldest + exceed = cb0 + exceed; violation <=> c1 >= thr <=> d0 + exceed >= 0
                violate_next = judged & (exceed ? (~d0[NW] | (&d0)) : ~d0[NW]);
                e_ext = {WINDOW{1'b0}};
                e_ext[0] = exceed;
                e1 = (e0 << 1) | e_ext;
                left = e1[WINDOW-1];                    // leaves at the push after this one
                n1 = (n0 == WINDOW[NW-1:0]) ? n0 : n0 + one;
                // the threshold steps: dthr0 of this push (n0 = 0 after clear), dthr1 of the next (n1 = n0 + 1
                // unless full): tables on n0
                dthr0 = clear ? (rank_threshold((2 > WINDOW) ? WINDOW : 2) != 1) : dthr_q;
                dthr1 = 1'b0;
                for (k = 0; k < WINDOW - 1; k = k + 1) begin
                    if (n0 == k[NW-1:0]) begin
                        dthr1 = (rank_threshold((k + 3 > WINDOW) ? WINDOW : k + 3)
                                 != rank_threshold((k + 2 > WINDOW) ? WINDOW : k + 2));
                    end
                end
                // d1 = cb1 - thr1 = d0 + exceed - left - dthr0
                case ({exceed, left, dthr0})
                    3'b100:                 delta = {{NW{1'b0}}, 1'b1};
                    3'b000, 3'b110, 3'b101: delta = {(NW + 1){1'b0}};
                    3'b011:                 delta = {(NW + 1){1'b1}} << 1;   // -2
                    default:                delta = {(NW + 1){1'b1}};    // 010, 001, 111: -1
                endcase
                d1 = d0 + delta;
            end

            sla_monitor_reg #(.W(QW), .RST_ASYNC(RST_ASYNC)) u_q (
                .clk(clk), .rst_hi(rst_hi),
                .d(push ? {n1, e1, d1, dthr1, violate_next} : q), .q(q));
            assign violate = v_q;
            assign samples = n_q;
            wire unused_rank = &{1'b0, val, limit};
        end
    endgenerate

endmodule


// A W-bit register, reset to zero: synchronous (RST_ASYNC = 0) or asynchronous.
module sla_monitor_reg #(
    parameter integer W         = 1,
    parameter integer RST_ASYNC = 0
) (
    input  wire         clk,
    input  wire         rst_hi,
    input  wire [W-1:0] d,
    output reg  [W-1:0] q
);
    generate
        if (RST_ASYNC != 0) begin : g_async
            always @(posedge clk or posedge rst_hi) begin
                if (rst_hi) q <= {W{1'b0}};
                else        q <= d;
            end
        end else begin : g_sync
            always @(posedge clk) begin
                if (rst_hi) q <= {W{1'b0}};
                else        q <= d;
            end
        end
    endgenerate
endmodule
/* verilator lint_on DECLFILENAME */
