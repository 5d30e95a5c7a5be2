#include "sieve/eval/eval_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "sieve/core/status.h"

namespace sieve {

namespace {

using json = nlohmann::ordered_json;

std::string dump(const json &j, int indent) {
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// One (row, task, ctx) with everything the tables and "cells" show.
struct CellReport {
    const EvalRow *row = nullptr;
    std::string task;
    int64_t ctx = 0;
    CellSummary sum;
    int64_t peak_kv_bytes = 0;
    double wall_ms = 0, prefill_ms = 0, decode_ms = 0;  // prefill / decode: means per sample
};

CellReport make_cell(const EvalResult &r, int i_row, const std::string &task, int64_t ctx) {
    CellReport c;
    c.row = &r.rows[static_cast<size_t>(i_row)];
    c.task = task;
    c.ctx = ctx;
    c.sum = eval_summarise(eval_outcomes(r, i_row, task, ctx));
    for (const EvalCellRun &run : r.runs) {
        if (run.row != i_row || run.task != task || run.ctx != ctx) continue;
        c.peak_kv_bytes = run.peak_kv_bytes;
        c.wall_ms = run.wall_ms;
    }
    int64_t n = 0;
    for (const EvalSampleResult &s : r.samples) {
        if (s.row != i_row || s.task != task || s.ctx != ctx) continue;
        c.prefill_ms += s.prefill_ms;
        c.decode_ms += s.decode_ms;
        ++n;
    }
    if (n > 0) {
        c.prefill_ms /= static_cast<double>(n);
        c.decode_ms /= static_cast<double>(n);
    }
    return c;
}

// Rows in order, cells task by task then length by length (the run's order).
std::vector<CellReport> all_cells(const EvalResult &r, const EvalPlan &plan) {
    std::vector<CellReport> out;
    for (int i = 0; i < static_cast<int>(r.rows.size()); ++i)
        for (const std::string &task : plan.tasks)
            for (int64_t ctx : plan.ctx) out.push_back(make_cell(r, i, task, ctx));
    return out;
}

double accuracy(const CellSummary &s) {
    return s.n_scored > 0 ? static_cast<double>(s.n_correct) / static_cast<double>(s.n_scored) : 0.0;
}

// "75.0 [30.1, 95.4] · KL 0.0012 · 1.00×"; ppl cells show perplexity instead.
std::string summary_cell(const CellReport &c) {
    const CellSummary &s = c.sum;
    const std::string kl = c.row->reference ? "KL —" : strfmt("KL %.4g", s.kl_mean);
    const std::string head = s.n_scored > 0 ? strfmt("%.1f [%.1f, %.1f]", 100.0 * accuracy(s),
                                                     100.0 * s.acc_ci.lo, 100.0 * s.acc_ci.hi)
                                            : strfmt("ppl %.3f", s.ppl);
    return strfmt("%s · %s · %.2f×", head.c_str(), kl.c_str(), s.compression);
}

std::string details_row(const CellReport &c) {
    const CellSummary &s = c.sum;
    const bool ref = c.row->reference;
    const std::string acc = s.n_scored > 0 ? strfmt("%.1f", 100.0 * accuracy(s)) : "—";
    const std::string ci =
        s.n_scored > 0 ? strfmt("%.1f–%.1f", 100.0 * s.acc_ci.lo, 100.0 * s.acc_ci.hi) : "—";
    const std::string ruler = s.n_scored > 0 ? strfmt("%.1f", 100.0 * s.ruler) : "—";
    const std::string kl = ref ? "— | —" : strfmt("%.4g | %.4g", s.kl_mean, s.kl_max);
    const std::string agree = ref ? "—" : strfmt("%.1f", 100.0 * s.agreement);
    return strfmt(
        "| %s | %s | %s | %lld | %lld | %s | %s | %s | %s | %s | %.3f | %.3f | %.2f× | %.2f | %.1f | %.1f |\n",
        c.row->policy.c_str(), cpu::row_type_name(c.row->kv_type), c.task.c_str(),
        static_cast<long long>(c.ctx), static_cast<long long>(s.n_samples), acc.c_str(), ci.c_str(),
        ruler.c_str(), kl.c_str(), agree.c_str(), s.ppl_ref, s.ppl, s.compression,
        static_cast<double>(c.peak_kv_bytes) / (1024.0 * 1024.0), c.prefill_ms, c.decode_ms);
}

json config_json(const EvalResult &r, const EvalPlan &plan, const EvalReportInfo &info) {
    json rows = json::array();
    for (const EvalRow &row : r.rows)
        rows.push_back({{"policy", row.policy},
                        {"kv_type", cpu::row_type_name(row.kv_type)},
                        {"reference", row.reference}});
    return {{"model", info.model},
            {"n_layer", r.n_layer},
            {"n_head_kv", r.n_head_kv},
            {"n_vocab", r.n_vocab},
            {"tasks", plan.tasks},
            {"ctx", plan.ctx},
            {"n_samples", plan.n_samples},
            {"seed", plan.seed},
            {"depths", plan.depths},
            {"max_tokens", plan.max_tokens},
            {"ppl_tokens", plan.ppl_tokens},
            {"n_threads", info.n_threads},
            {"n_parallel", info.n_parallel},
            {"cache_type", cpu::row_type_name(plan.engine.kv_type)},
            {"ref_cache_type", cpu::row_type_name(plan.ref_kv_type)},
            {"exact", plan.engine.act_precision == cpu::ActPrecision::f32},
            {"share_prefill", plan.share_prefill},
            {"rows", rows},
            {"wall_s", r.wall_s}};
}

// null where a number does not apply (the reference's KL, a ppl cell's accuracy).
json num_or_null(bool applies, double x) {
    return applies ? json(x) : json(nullptr);
}

json cell_json(const CellReport &c) {
    const CellSummary &s = c.sum;
    const bool ref = c.row->reference, scored = s.n_scored > 0;
    return {{"policy", c.row->policy},
            {"kv_type", cpu::row_type_name(c.row->kv_type)},
            {"reference", ref},
            {"task", c.task},
            {"ctx", c.ctx},
            {"n_samples", s.n_samples},
            {"n_scored", s.n_scored},
            {"n_correct", s.n_correct},
            {"accuracy", num_or_null(scored, accuracy(s))},
            {"acc_lo", num_or_null(scored, s.acc_ci.lo)},
            {"acc_hi", num_or_null(scored, s.acc_ci.hi)},
            {"ruler", num_or_null(scored, s.ruler)},
            {"kl_mean", num_or_null(!ref, s.kl_mean)},
            {"kl_max", num_or_null(!ref, s.kl_max)},
            {"agreement", num_or_null(!ref, s.agreement)},
            {"ppl_ref", s.ppl_ref},
            {"ppl", s.ppl},
            {"compression", s.compression},
            {"peak_kv_bytes", c.peak_kv_bytes},
            {"prefill_ms", c.prefill_ms},
            {"decode_ms", c.decode_ms},
            {"wall_ms", c.wall_ms}};
}

json sample_json(const EvalResult &r, const EvalSampleResult &s) {
    const EvalRow &row = r.rows[static_cast<size_t>(s.row)];
    json rows = json::array();
    int64_t kept = 0;
    for (int64_t l = 0; l < r.n_layer && !s.rows_kept.empty(); ++l) {
        json per_head = json::array();
        for (int64_t h = 0; h < r.n_head_kv; ++h) {
            const int64_t k = s.rows_kept[static_cast<size_t>(l * r.n_head_kv + h)];
            per_head.push_back(k);
            kept += k;
        }
        rows.push_back(per_head);
    }
    const double dense = static_cast<double>(s.rows_dense) * static_cast<double>(s.rows_kept.size());
    return {{"policy", row.policy},
            {"kv_type", cpu::row_type_name(row.kv_type)},
            {"reference", row.reference},
            {"task", s.task},
            {"ctx", s.ctx},
            {"seed", s.seed},
            {"depth", num_or_null(s.depth >= 0, s.depth)},
            {"n_prompt", s.n_prompt},
            {"scored", s.scored},
            {"correct", s.correct},
            {"ruler", num_or_null(s.scored, s.ruler)},
            {"answers", s.answers},
            {"output", s.output},
            {"n_gen", s.n_gen},
            {"n_steps", s.steps.n_steps},
            {"kl_mean", num_or_null(!row.reference, s.steps.kl_mean)},
            {"kl_max", num_or_null(!row.reference, s.steps.kl_max)},
            {"agreement", num_or_null(!row.reference, s.steps.agreement)},
            {"nll_ref", s.steps.nll_ref},
            {"nll", s.steps.nll},
            {"ref_margin", num_or_null(s.steps.n_steps > 0, s.steps.ref_margin)},
            {"ref_margin_step", s.steps.ref_margin_step},
            {"first_disagree", s.steps.first_disagree},
            {"disagree_margin", num_or_null(s.steps.first_disagree >= 0, s.steps.disagree_margin)},
            {"rows_dense", s.rows_dense},
            {"rows_kept", rows},
            {"compression", kept > 0 ? dense / static_cast<double>(kept) : 0.0},
            {"cached_tokens", s.cached_tokens},
            {"prefill_ms", s.prefill_ms},
            {"decode_ms", s.decode_ms},
            {"error", s.error}};
}

}  // namespace

std::string eval_report_md(const EvalResult &r, const EvalPlan &plan, const EvalReportInfo &info) {
    const std::vector<CellReport> cells = all_cells(r, plan);
    std::string o =
        strfmt("sieve eval: %s, %lld samples per cell, seed %llu, %.1f s\n\n", info.model.c_str(),
               static_cast<long long>(plan.n_samples), static_cast<unsigned long long>(plan.seed), r.wall_s);
    o += "accuracy % [95% Wilson interval] · mean KL(dense ‖ policy), nats/token · compression (dense rows / "
         "kept rows)\naccuracy: every expected string in the output; RULER %: the mean fraction found "
         "(RULER's string_match_all, case-insensitive)\n\n";
    o += "| policy | KV |";
    std::string rule = "|---|---|";
    for (const std::string &task : plan.tasks)
        for (int64_t ctx : plan.ctx) {
            o += strfmt(" %s @%lld |", task.c_str(), static_cast<long long>(ctx));
            rule += "---|";
        }
    o += "\n";
    o += rule;
    o += "\n";
    const size_t per_row = plan.tasks.size() * plan.ctx.size();
    for (size_t i = 0; i < cells.size(); i += per_row) {
        o += strfmt("| %s | %s |", cells[i].row->policy.c_str(), cpu::row_type_name(cells[i].row->kv_type));
        for (size_t j = i; j < i + per_row; ++j) {
            o += ' ';
            o += summary_cell(cells[j]);
            o += " |";
        }
        o += "\n";
    }
    o += "\n| policy | KV | task | ctx | n | acc % | 95% CI | RULER % | KL mean | KL max | top-1 agree % | ppl dense | "
         "ppl policy | compression | peak KV MiB | prefill ms | decode ms |\n";
    o += "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const CellReport &c : cells) o += details_row(c);
    return o;
}

std::string eval_report_json(const EvalResult &r, const EvalPlan &plan, const EvalReportInfo &info) {
    json cells = json::array(), samples = json::array();
    for (const CellReport &c : all_cells(r, plan)) cells.push_back(cell_json(c));
    for (const EvalSampleResult &s : r.samples) samples.push_back(sample_json(r, s));
    const json j = {{"config", config_json(r, plan, info)}, {"cells", cells}, {"samples", samples}};
    return dump(j, 2) + "\n";
}

std::string eval_report_jsonl(const EvalResult &r) {
    std::string o;
    for (const EvalSampleResult &s : r.samples) o += dump(sample_json(r, s), -1) + "\n";
    return o;
}

std::string eval_sample_jsonl(const EvalSample &s, int64_t n_forced) {
    json needles = json::array();
    for (const EvalNeedle &n : s.needles)
        needles.push_back(
            {{"text", n.text}, {"depth_asked", n.depth_asked}, {"token", n.token}, {"depth", n.depth}});
    const json j = {{"task", s.task},
                    {"seed", s.seed},
                    {"ctx", s.n_tokens_target},
                    {"prompt", s.prompt},
                    {"prompt_ids", s.prompt_ids},
                    {"n_forced", n_forced},
                    {"answers", s.answers},
                    {"needles", needles}};
    return dump(j, -1) + "\n";
}

std::string eval_kept_jsonl(const EvalResult &r) {
    std::string out;
    for (const EvalSampleResult &s : r.samples) {
        if (s.kept_positions.empty()) continue;
        json lanes = json::array();
        for (std::vector<int32_t> p : s.kept_positions) {
            std::sort(p.begin(), p.end());
            lanes.push_back(p);
        }
        const json j = {{"policy", r.rows[static_cast<size_t>(s.row)].policy},
                        {"task", s.task},
                        {"ctx", s.ctx},
                        {"seed", s.seed},
                        {"n_prompt", s.n_prompt},
                        {"n_layer", r.n_layer},
                        {"n_head_kv", r.n_head_kv},
                        {"kept", lanes}};
        out += dump(j, -1) + "\n";
    }
    return out;
}

}  // namespace sieve
