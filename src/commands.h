/* commands.h — one function per `qwen-ft` command. Each parses its own argv (argv[0] is the command name),
 * runs after MPI_Init, and returns the process exit code (0, 2 bad input, 3 runtime failure). Rank 0 prints. */
#ifndef QF_COMMANDS_H
#define QF_COMMANDS_H
int qf_cmd_train(int argc, char **argv);
int qf_cmd_eval(int argc, char **argv);
int qf_cmd_prepare(int argc, char **argv);
int qf_cmd_import(int argc, char **argv);
int qf_cmd_export(int argc, char **argv);
int qf_cmd_generate(int argc, char **argv);
int qf_cmd_estimate(int argc, char **argv);
int qf_cmd_report(int argc, char **argv);
int qf_cmd_plot(int argc, char **argv);
int qf_cmd_deck(int argc, char **argv);
#endif
