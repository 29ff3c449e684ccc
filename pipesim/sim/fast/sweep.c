/* The fast evaluator's sweep as plain C: the loop of pipesim/sim/fast/kernel.py
 * (sweep_kernel and its helpers), statement for statement.
 *
 * It is built when pipesim is installed, where a C compiler is found (hatch_build.py),
 * into _sweep.so beside this file, and loaded through ctypes (pipesim/sim/fast/native.py):
 * a millisecond, against the ~0.3 s it takes to import numba and load its cached code.
 * Where it is missing or was built from another version of this file, numba's loop runs,
 * and without numba the Python one.
 *
 * Every float operation is the Python loop's, in its order: additions and comparisons
 * on doubles, no contraction into fused multiply-adds (built with -ffp-contract=off), no
 * fast-math. The three runners' timelines agree to the bit (tests/sim/test_fast_paths.py).
 */

#include <stdint.h>

/* Everything one sweep reads and writes (the Python loop's graph, times and state). */
typedef struct {
    /* the graph: device ranges, each node's input and output, the groups' messages */
    const int64_t *bounds, *input_of, *output_of;
    const int64_t *group_input_first, *group_inputs, *group_output_first, *group_outputs;
    /* the times: per node its duration; per message its channel, occupancy, latency */
    const double *duration;
    const int64_t *channel;
    const double *occupancy, *latency;
    /* per node */
    double *end, *start;
    int8_t *cause;
    int64_t *cause_ref;
    double *scheduled;
    /* per message */
    double *arrival, *begin;
    int64_t *behind;
    double *sent;
    /* run bounds; per channel; per device */
    int64_t *runs;
    double *channel_free;
    int64_t *channel_last;
    double *free;
    int64_t *free_ref, *at, *active;
    int64_t nodes, messages, lanes, devices;
    double overhead_ms;
    int hold;
    int8_t start_code, device_code, sending_code, input_code;
} sweep_t;

/* Send message k at time t; return its arrival (kernel.py: _send). */
static double send_message(sweep_t *s, int64_t k, double t) {
    int64_t c = s->channel[k];
    s->sent[k] = t;
    s->behind[k] = -1;
    if (c < 0) {
        s->arrival[k] = t;
        s->begin[k] = t;
        return t;
    }
    double f = s->channel_free[c];
    if (f > t) s->behind[k] = s->channel_last[c];
    double b = f > t ? f : t;
    s->begin[k] = b;
    f = b + s->occupancy[k];
    s->channel_free[c] = f;
    s->channel_last[c] = k;
    double a = f + s->latency[k];
    s->arrival[k] = a;
    return a;
}

/* Whether every input of group g has been sent (kernel.py: _all_sent). */
static int all_sent(const sweep_t *s, int64_t g) {
    for (int64_t q = s->group_input_first[g]; q < s->group_input_first[g + 1]; q++) {
        if (s->sent[s->group_inputs[q]] < 0.0) return 0;
    }
    return 1;
}

/* When group g starts, when it is due, and why (kernel.py: _group_input). */
static void group_input(const sweep_t *s, int64_t g, double *ready, double *due, int8_t *why,
                        int64_t *ref) {
    for (int64_t q = s->group_input_first[g]; q < s->group_input_first[g + 1]; q++) {
        int64_t m = s->group_inputs[q];
        if (s->sent[m] > *due) *due = s->sent[m];
        if (s->arrival[m] > *ready) {
            *ready = s->arrival[m];
            *why = s->input_code;
            *ref = s->nodes + m;
        }
    }
}

/* Send group g's messages after node `node` ended at `end`; the device's free time and
 * what frees it (kernel.py: _ship_group). */
static void ship_group(sweep_t *s, int64_t g, int64_t node, double end, double *free,
                       int64_t *ref) {
    *free = end;
    *ref = node;
    for (int64_t q = s->group_output_first[g]; q < s->group_output_first[g + 1]; q++) {
        int64_t m = s->group_outputs[q];
        double a = send_message(s, m, end);
        if (s->hold && a > end && a >= *free) {
            *free = a;
            *ref = s->nodes + m;
        }
    }
}

/* Run device d on while its next node's input is known (kernel.py: _run_device). */
static int64_t run_device(sweep_t *s, int64_t d) {
    int64_t i = s->at[d], stop = s->bounds[d + 1], ref = s->free_ref[d];
    double t = s->free[d];
    while (i < stop) {
        int8_t why = ref < 0 ? s->start_code : (ref >= s->nodes ? s->sending_code : s->device_code);
        double ready = t, due = t;
        int64_t k = s->input_of[i];
        if (k >= 0) {
            if (s->sent[k] < 0.0) break;
            if (s->sent[k] > due) due = s->sent[k];
            if (s->arrival[k] > ready) {
                ready = s->arrival[k];
                why = s->input_code;
                ref = s->nodes + k;
            }
        } else if (k != -1) {
            if (!all_sent(s, -2 - k)) break;
            group_input(s, -2 - k, &ready, &due, &why, &ref);
        }
        s->start[i] = ready;
        s->cause[i] = why;
        s->cause_ref[i] = ref;
        s->scheduled[i] = due;
        t = ready + s->duration[i];
        t = t + s->overhead_ms;
        s->end[i] = t;
        ref = i;
        k = s->output_of[i];
        if (k >= 0) {
            double a = send_message(s, k, t);
            if (s->hold && a > t) {
                t = a;
                ref = s->nodes + k;
            }
        } else if (k != -1) {
            ship_group(s, -2 - k, i, t, &t, &ref);
        }
        i++;
    }
    s->at[d] = i;
    s->free[d] = t;
    s->free_ref[d] = ref;
    return i;
}

/* Every device at its first node, every message unsent, every channel free at 0; the
 * devices with work listed; return how many (kernel.py: _first_active). */
static int64_t first_active(sweep_t *s) {
    for (int64_t k = 0; k < s->messages; k++) s->sent[k] = -1.0;
    for (int64_t c = 0; c < s->lanes; c++) s->channel_free[c] = 0.0;
    int64_t count = 0;
    for (int64_t d = 0; d < s->devices; d++) {
        s->at[d] = s->bounds[d];
        s->free[d] = 0.0;
        s->free_ref[d] = -1;
        if (s->bounds[d] < s->bounds[d + 1]) s->active[count++] = d;
    }
    return count;
}

/* The sweep (kernel.py: sweep_kernel). graph: the 7 graph vectors; times: the 4 time
 * vectors; state: the 16 state buffers, in kernel.py's order; sizes: nodes, messages,
 * channels (lanes), devices; codes: the Cause codes START, DEVICE, SENDING, INPUT.
 * Returns how many run bounds were written, or -1 on a deadlock. */
int64_t pipesim_sweep(void **graph, void **times, void **state, const int64_t *sizes,
                      const int8_t *codes, double overhead_ms, int32_t hold) {
    sweep_t s = {
        .bounds = graph[0],
        .input_of = graph[1],
        .output_of = graph[2],
        .group_input_first = graph[3],
        .group_inputs = graph[4],
        .group_output_first = graph[5],
        .group_outputs = graph[6],
        .duration = times[0],
        .channel = times[1],
        .occupancy = times[2],
        .latency = times[3],
        .end = state[0],
        .start = state[1],
        .cause = state[2],
        .cause_ref = state[3],
        .scheduled = state[4],
        .arrival = state[5],
        .begin = state[6],
        .behind = state[7],
        .sent = state[8],
        .runs = state[9],
        .channel_free = state[10],
        .channel_last = state[11],
        .free = state[12],
        .free_ref = state[13],
        .at = state[14],
        .active = state[15],
        .nodes = sizes[0],
        .messages = sizes[1],
        .lanes = sizes[2],
        .devices = sizes[3],
        .overhead_ms = overhead_ms,
        .hold = hold != 0,
        .start_code = codes[0],
        .device_code = codes[1],
        .sending_code = codes[2],
        .input_code = codes[3],
    };
    int64_t count = first_active(&s), written = 0;
    while (count > 0) {
        int moved = 0;
        for (int64_t j = 0; j < count; j++) {
            int64_t device = s.active[j], first = s.at[device];
            int64_t stop = run_device(&s, device);
            if (stop != first) {
                moved = 1;
                s.runs[written] = first;
                s.runs[written + 1] = stop;
                written += 2;
            }
        }
        if (!moved) return -1;
        int64_t alive = 0;
        for (int64_t j = 0; j < count; j++) {
            int64_t d = s.active[j];
            if (s.at[d] < s.bounds[d + 1]) s.active[alive++] = d;
        }
        count = alive;
    }
    return written;
}

/* The CRC-32 of this file's text when it was built (set by hatch_build.py), so that a
 * library built from another version of it is never loaded. */
#ifndef PIPESIM_SWEEP_SOURCE_CRC
#define PIPESIM_SWEEP_SOURCE_CRC 0
#endif
uint32_t pipesim_sweep_source_crc(void) { return (uint32_t)(PIPESIM_SWEEP_SOURCE_CRC); }
