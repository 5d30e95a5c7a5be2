# sieve bench-serve against a fake OpenAI streaming server (fake_openai_server.py)
# over loopback HTTP: one CTest entry per case of bench_serve_e2e.sh. The
# TIMEOUT bounds a hang; the cases themselves take a few seconds.
if(Python3_Interpreter_FOUND)
  foreach(case completions_ids chat_sweep random_lengths_rate no_usage_text http_errors timeout unreachable usage)
    add_test(NAME cli.bench_serve.${case}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_serve_e2e.sh $<TARGET_FILE:sieve> ${case})
    set_tests_properties(cli.bench_serve.${case} PROPERTIES LABELS cli TIMEOUT 60)
  endforeach()
endif()
