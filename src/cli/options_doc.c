/* options_doc.c — what the option tables say about themselves: a command's --help, the man page, the bash
 * completion (see options.h). */
#include <string.h>
#include "options.h"

#define HELP_WIDTH 100
#define HELP_COL 28

static const char *meta_of(const qf_opt *o) {
    if (o->meta) return o->meta;
    if (o->type == QF_OPT_CHOICE) return o->choices;
    return "VALUE";
}

/* "-o, --out=FILE" */
static void opt_label(const qf_opt *o, char *buf, size_t cap) {
    char s[8] = "    ";
    if (o->short_name) snprintf(s, sizeof s, "-%c, ", o->short_name);
    if (o->type == QF_OPT_FLAG) snprintf(buf, cap, "%s--%s", s, o->name);
    else snprintf(buf, cap, "%s--%s=%s", s, o->name, meta_of(o));
}

/* the help sentence with its default and whether it is required */
static void opt_text(const qf_opt *o, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", o->help ? o->help : "");
    if (o->def && o->type != QF_OPT_FLAG && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " (default: %s)", o->def[0] ? o->def : "empty");
    if (o->required && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, " (required)");
}

/* text wrapped at HELP_WIDTH, every line after the first indented by col (the first starts at column at) */
static void wrap(FILE *f, const char *text, int at, int col) {
    int x = at;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        int w = (int)strcspn(p, " ");
        if (!w) break;
        if (x > col && x + 1 + w > HELP_WIDTH) {
            fprintf(f, "\n%*s", col, "");
            x = col;
        } else if (x > col) {
            fputc(' ', f);
            x++;
        }
        fwrite(p, 1, (size_t)w, f);
        x += w;
        p += w;
    }
    fputc('\n', f);
}

void qf_opts_help(const qf_cmd *cmd, FILE *f) {
    fprintf(f, "usage: qwen-ft %s %s\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    if (cmd->about) fprintf(f, "\n%s\n", cmd->about);
    fprintf(f, "\noptions:\n");
    char label[160], text[1200];
    for (int i = 0; i <= cmd->nopts; i++) {
        const qf_opt help = {.name = "help", .short_name = 'h', .type = QF_OPT_FLAG, .help = "print this help and exit"};
        const qf_opt *o = i < cmd->nopts ? &cmd->opts[i] : &help;
        opt_label(o, label, sizeof label);
        opt_text(o, text, sizeof text);
        int w = fprintf(f, "  %s", label);
        if (w + 2 > HELP_COL) {
            fprintf(f, "\n%*s", HELP_COL, "");
        } else {
            fprintf(f, "%*s", HELP_COL - w, "");
        }
        wrap(f, text, HELP_COL, HELP_COL);
    }
}

/* roff text: backslashes and dashes escaped, a leading dot or quote neutralised */
static void roff(FILE *f, const char *s) {
    int bol = 1;
    for (; *s; s++) {
        if (bol && (*s == '.' || *s == '\'')) fputs("\\&", f);
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else fputc(*s, f);
        bol = *s == '\n';
    }
}

void qf_opts_man(const qf_cmd *const *cmds, int n, const char *version, FILE *f) {
    fprintf(f, ".TH QWEN\\-FT 1 \"\" \"qwen\\-ft %s\" \"User Commands\"\n.SH NAME\nqwen\\-ft \\- full\\-parameter "
               "fine\\-tuning of Qwen models, an MPI program\n.SH SYNOPSIS\n.B qwen\\-ft\n.I COMMAND\n[\\fIOPTION\\fR]...\n"
               ".br\n.B srun qwen\\-ft\n.I DECK.cfg\n[\\fB\\-\\-set\\fR \\fIkey.path=value\\fR]...\n"
               ".SH DESCRIPTION\nOne binary, started by srun or mpirun like any MPI program: a libconfig deck in "
               "(DeepSpeed's key names), metrics, logs and restartable parallel\\-HDF5 checkpoints out. Options "
               "take GNU syntax: \\fB\\-\\-opt=value\\fR or \\fB\\-\\-opt value\\fR.\n.SH COMMANDS\n",
            version);
    char label[160], text[1200];
    for (int c = 0; c < n; c++) {
        const qf_cmd *cmd = cmds[c];
        fprintf(f, ".SS \"qwen\\-ft %s ", cmd->name);
        roff(f, cmd->synopsis);
        fprintf(f, "\"\n");
        roff(f, cmd->summary);
        fprintf(f, "\n");
        if (cmd->about) {
            fprintf(f, ".PP\n.nf\n");
            roff(f, cmd->about);
            fprintf(f, "\n.fi\n");
        }
        for (int i = 0; i < cmd->nopts; i++) {
            opt_label(&cmd->opts[i], label, sizeof label);
            opt_text(&cmd->opts[i], text, sizeof text);
            fprintf(f, ".TP\n.B ");
            roff(f, label + 4 * !cmd->opts[i].short_name);
            fprintf(f, "\n");
            roff(f, text);
            fprintf(f, "\n");
        }
    }
    fprintf(f, ".SH EXIT STATUS\n0 done; 2 bad input (deck, data, model file, command line), with a message naming the "
               "file, line, key or option; 3 runtime failure (out of memory, MPI/NCCL error, a lost rank).\n"
               ".SH ENVIRONMENT\n.TP\n.B QWENFT_TIKTOKEN_RANKS=N\nA qwen.tiktoken must have Qwen v1's 151643 ranks (its "
               "special tokens are numbered from 151643 on); any other count is refused as a file cut short, unless "
               "this names it: a tiktoken vocabulary of your own of N ranks, its special tokens following them.\n"
               ".TP\n.B TMPDIR\nwhere export writes the tokenizer files a model carries while it checks them (when "
               "shorter than 36 characters; /tmp otherwise).\n"
               ".SH FILES\nshare/qwen\\-ft/inputs (decks), share/qwen\\-ft/slurm (job scripts), share/qwen\\-ft/docs "
               "(deck keys, formats, ZeRO, HPC notes).\n.SH SEE ALSO\n.BR mpirun (1),\n.BR srun (1)\n");
}

void qf_opts_bash_completion(const qf_cmd *const *cmds, int n, FILE *f) {
    fprintf(f, "# bash completion for qwen-ft (generated by `qwen-ft --completion bash`)\n"
               "_qwen_ft() {\n"
               "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=${COMP_WORDS[1]} opts=\n"
               "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
               "    COMPREPLY=($(compgen -W \"help --help --version");
    for (int c = 0; c < n; c++) fprintf(f, " %s", cmds[c]->name);
    fprintf(f, "\" -- \"$cur\") $(compgen -f -X '!*.cfg' -- \"$cur\"))\n    return\n  fi\n"
               "  case $cmd in *.cfg) cmd=train ;; help) COMPREPLY=($(compgen -W \"");
    for (int c = 0; c < n; c++) fprintf(f, "%s%s", c ? " " : "", cmds[c]->name);
    fprintf(f, "\" -- \"$cur\")); return ;; esac\n  case $cmd:$prev in\n");
    for (int c = 0; c < n; c++)
        for (int i = 0; i < cmds[c]->nopts; i++) {
            const qf_opt *o = &cmds[c]->opts[i];
            if (o->type != QF_OPT_CHOICE) continue;
            fprintf(f, "    %s:--%s) COMPREPLY=($(compgen -W \"", cmds[c]->name, o->name);
            for (const char *p = o->choices; *p; p++) fputc(*p == '|' ? ' ' : *p, f);
            fprintf(f, "\" -- \"$cur\")); return ;;\n");
        }
    fprintf(f, "  esac\n  case $cmd in\n");
    for (int c = 0; c < n; c++) {
        fprintf(f, "    %s) opts=\"--help", cmds[c]->name);
        for (int i = 0; i < cmds[c]->nopts; i++) fprintf(f, " --%s", cmds[c]->opts[i].name);
        fprintf(f, "\" ;;\n");
    }
    fprintf(f, "  esac\n"
               "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); return; fi\n"
               "  COMPREPLY=($(compgen -f -- \"$cur\"))\n"
               "}\n"
               "complete -o filenames -o bashdefault -F _qwen_ft qwen-ft\n");
}
