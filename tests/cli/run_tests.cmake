# Tests of `sieve run` (included from tests/cli/CMakeLists.txt). Each runs the
# real binary through expect.sh, which checks the exit status and regexes on
# stdout and stderr.

set(SIEVE_STORIES "${SIEVE_TEST_MODELS}/stories260K.gguf")
set(SIEVE_DEFAULT_MODEL "${SIEVE_MODEL_CACHE}/SmolLM2-135M-Instruct.Q4_1.gguf")
set(SIEVE_EXPECT "${CMAKE_CURRENT_LIST_DIR}/expect.sh")
set(SIEVE_BIN "$<TARGET_FILE:sieve>")

# sieve_run_test(NAME RC STDOUT_REGEX STDERR_REGEX [EXPECT_OPTIONS ...] -- ARGS...)
function(sieve_run_test name rc out_re err_re)
  set(opts "")
  set(args "")
  set(seen_sep FALSE)
  foreach(a ${ARGN})
    if(a STREQUAL "--")
      set(seen_sep TRUE)
    elseif(seen_sep)
      list(APPEND args "${a}")
    else()
      list(APPEND opts "${a}")
    endif()
  endforeach()
  add_test(NAME cli.run.${name}
           COMMAND ${SIEVE_EXPECT} ${opts} ${rc} "${out_re}" "${err_re}" -- ${SIEVE_BIN} run ${args})
  set_tests_properties(cli.run.${name} PROPERTIES LABELS cli)
endfunction()

# --- generation ---------------------------------------------------------------
sieve_run_test(stories_greedy 0 "^Once upon a time.{40,}" "generation: 32 tokens .*tok/s.*ms/token.*GB/s"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 32 --temp 0 -t 2)
sieve_run_test(stories_sampled 0 "^Once upon a time.{40,}" "prompt: [0-9]+ tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 24 --temp 1.1 --top-k 0 --top-p 0.9 --min-p 0.02
     --repeat-penalty 1.1 --presence-penalty 0.2 --frequency-penalty 0.1 -s 7)
sieve_run_test(stories_no_display_prompt 0 "" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --temp 0 --no-display-prompt)
sieve_run_test(stories_prompt_file 0 "^The cat.{20,}" "generation: 16 tokens"
  -- -m ${SIEVE_STORIES} -f ${CMAKE_CURRENT_LIST_DIR}/prompt_cat.txt -n 16 --temp 0)
# Prompt longer than the -b batch: prefill runs in several forward passes.
sieve_run_test(stories_small_batches 0 "^Once upon a time, there" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time, there was a little girl" -n 8 --temp 0 -b 3)
sieve_run_test(stories_context_fills 0 "" "context full"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n -1 -c 24 --temp 0)
add_test(NAME cli.run.same_seed_same_text
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/same_output.sh ${SIEVE_BIN} run -m ${SIEVE_STORIES}
                 -p "Once upon a time" -n 24 --temp 1.0 -s 1234)
set_tests_properties(cli.run.same_seed_same_text PROPERTIES LABELS cli)
add_test(NAME cli.run.mmap_same_text
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/mmap_same_output.sh ${SIEVE_BIN} run -m ${SIEVE_STORIES}
                 -p "Once upon a time" -n 24 --temp 1.0 -s 99)
set_tests_properties(cli.run.mmap_same_text PROPERTIES LABELS cli)

# A chat template forced onto a model without one; two turns read from stdin,
# the second appended to the KV the first left (prefill at a position > 0).
sieve_run_test(interactive_chat_keeps_kv 0 "> " "prefill [0-9]+ tokens at position [1-9]"
  --stdin "Hello there\\nTell me more\\n"
  -- -m ${SIEVE_STORIES} --chat-template chatml -i -n 6 --temp 0 --verbose)
sieve_run_test(interactive_raw 0 "> " "generation: 12 tokens"
  --stdin "Once upon a time\\nThe end\\n"
  -- -m ${SIEVE_STORIES} -i -no-cnv -n 6 --temp 0)

# The default model answers a question through its chat template. (Not
# "capital of France": there the exact model's first token is a near-tie,
# 0.08 logits between "The" and "L", that 8-bit activation rounding flips;
# see docs/correctness.md.)
sieve_run_test(default_model_chat 0 "Tokyo" "chat template: chatml"
  --require ${SIEVE_DEFAULT_MODEL}
  -- -p "What is the capital of Japan?" -n 24 --temp 0)

# --- errors ---------------------------------------------------------------------
sieve_run_test(help 0 "usage: sieve run" "" -- --help)
sieve_run_test(unknown_flag 2 "" "unknown option '--bogus'" -- --bogus)
sieve_run_test(bad_int 2 "" "-n: expected an integer, got 'abc'" -- -m ${SIEVE_STORIES} -n abc)
sieve_run_test(bad_float 2 "" "--temp: expected a number, got 'hot'" -- --temp hot)
sieve_run_test(out_of_range 2 "" "--top-p: expected a number in \\[0, 1\\], got 1.5" -- --top-p 1.5)
sieve_run_test(inline_value 2 "" "--top-k: expected an integer, got 'x'" -- --top-k=x)
sieve_run_test(missing_value 2 "" "-m: expected a GGUF file path after it" -- -m)
sieve_run_test(bad_template_name 2 "" "unknown chat template name 'jinja'.*chatml, llama3" -- --chat-template jinja)
sieve_run_test(no_prompt 2 "" "no prompt" -- -m ${SIEVE_STORIES} -no-cnv)
sieve_run_test(missing_model 1 "" "error: model '/nonexistent/model.gguf'" -- -m /nonexistent/model.gguf -p hi)
sieve_run_test(default_model_missing 1 "" "default model is not at .*scripts/fetch_model.sh"
  -- -p hi)
set_tests_properties(cli.run.default_model_missing PROPERTIES
                     ENVIRONMENT "SIEVE_CACHE=${CMAKE_CURRENT_BINARY_DIR}/no-such-cache")
sieve_run_test(prompt_too_long 1 "" "prompt needs [0-9]+ tokens but only 8 of the context's 8 are free.*-c"
  -- -m ${SIEVE_STORIES} -c 8 -p "Once upon a time there was a very long prompt that does not fit")
# KV row types (llama.cpp's -ctk / -ctv): f32 (the oracle) and bf16 run; K and V
# may differ, except f32, which pairs with f32 only.
sieve_run_test(cache_type_f32 0 "^Once upon a time.{20,}" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --temp 0 -ctk f32 -ctv f32)
sieve_run_test(cache_type_bf16 0 "^Once upon a time.{20,}" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --temp 0 --cache-type-k bf16)
sieve_run_test(cache_type_mixed 0 "^Once upon a time.{20,}" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --temp 0 -ctk f16 -ctv bf16)
sieve_run_test(cache_type_mixed_f32 2 "" "--cache-type-k f16 with --cache-type-v f32: f32 rows \\(the exact oracle\\) go with f32 only"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 -ctk f16 -ctv f32)
# --rotate-k: keys and queries rotated alike (any row type); a bad value is refused.
sieve_run_test(rotate_k_on 0 "^Once upon a time.{20,}" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --temp 0 -ctk f16 --rotate-k on)
sieve_run_test(rotate_k_bad 2 "" "--rotate-k: expected auto, on or off, got 'yes'"
  -- -m ${SIEVE_STORIES} -p "Once upon a time" -n 8 --rotate-k yes)
# --kv-policy: the prompt is compressed (the log says how much) and generation goes on.
set(long_prompt "Once upon a time there was a little girl named Lily. She liked to play in the park with her dog. One day she saw a big red ball under a tree and ran to get it. Her dog ran after her and they played all day.")
sieve_run_test(kv_policy_snapkv 0 "^Once upon a time.{20,}" "KV policy snapkv:keep=0.25: [0-9]+ positions, 2[0-9]\\.[0-9]% of the rows kept"
  -- -m ${SIEVE_STORIES} -p "${long_prompt}" -n 16 --temp 0 --kv-policy snapkv:keep=0.25)
sieve_run_test(kv_policy_sliding 0 "^Once upon a time.{20,}" "KV policy streaming:budget=12: [0-9]+ positions, 1[0-9]\\.[0-9]% of the rows kept"
  -- -m ${SIEVE_STORIES} -p "${long_prompt}" -n 60 --temp 0 --kv-policy streaming:budget=12)
sieve_run_test(kv_policy_h2o 0 "^Once upon a time.{20,}" "generation: 60 tokens"
  -- -m ${SIEVE_STORIES} -p "${long_prompt}" -n 60 --temp 0 --kv-policy h2o:budget=20)
sieve_run_test(kv_policy_bad 2 "" "--kv-policy: KV policy 'h2o:window=3': h2o has no key 'window'"
  -- -m ${SIEVE_STORIES} -p "Once" -n 4 --kv-policy h2o:window=3)
sieve_run_test(cnv_without_template 1 "" "no tokenizer.chat_template.*--chat-template"
  -- -m ${SIEVE_STORIES} -cnv -p hi)

# --- the KV page pool (--kv-memory) ---------------------------------------------
# stories260K: 5 layers x 4 KV heads x K/V = 40 lanes; a 4 KiB-page pool of 16
# pages cannot hold one page per lane, so the prompt's reserve fails cleanly.
sieve_run_test(kv_memory_too_small 1 "" "KV pool exhausted.*raise --kv-memory"
  -- -m ${SIEVE_STORIES} --kv-memory 64KiB --kv-page-size 4KiB -p "Once upon a time" -n 4 --temp 0)
sieve_run_test(kv_memory_enough 0 "Once upon a time" "generation: 8 tokens"
  -- -m ${SIEVE_STORIES} --kv-memory 1MiB --kv-page-size 4KiB -p "Once upon a time" -n 8 --temp 0)
# More than the machine has: refused before anything runs (the pool backs its
# pages lazily, so it would otherwise end in the OOM killer).
sieve_run_test(kv_memory_past_ram 1 "" "KV memory of 102400.00 GiB is more than this machine has available"
  -- -m ${SIEVE_STORIES} --kv-memory 100TiB -p "Once upon a time" -n 4 --temp 0)
sieve_run_test(kv_memory_bad_unit 2 "" "--kv-memory: byte size '12XB'"
  -- -m ${SIEVE_STORIES} --kv-memory 12XB)
sieve_run_test(kv_page_size_bad 1 "" "page size"
  -- -m ${SIEVE_STORIES} --kv-page-size 3KiB -p hi -n 1)
