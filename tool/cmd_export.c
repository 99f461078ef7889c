#include "tool/cli.h"
#include "common/log.h"
int cmd_export_adapter(int argc, char **argv) { (void)argc; (void)argv; glm_log_error("not built yet"); return GLM_EXIT_FAIL; }
