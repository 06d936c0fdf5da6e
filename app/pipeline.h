/* --pipeline: the model's layers split into stages over the ranks of an MPI
 * job (app/pipeline_mpi.c; the library only knows ms_stage_link). Rank 0
 * runs the command; the other ranks serve their stage and never return. */
#ifndef MS_APP_PIPELINE_H
#define MS_APP_PIPELINE_H

#include "moestream.h"
#include "options.h"

/* Without --pipeline: nothing. With it: joins the MPI job, splits the
 * layers (--stages, else balanced by bytes), and on rank 0 sets eo's stage
 * and link once every other rank has opened its stage (an error names the
 * rank); on the other ranks serves the stage until rank 0 ends, then
 * exits. Refused by a binary built without MPI. */
int pipeline_open(const cli_args *a, ms_engine_opts *eo, ms_error *err);
/* With --pipeline in the MPI build: joins the job (once) and returns this
 * process's rank, 0 being the front end; otherwise 0. A command whose rank 0
 * does more than compute (serve listens) asks first. */
int pipeline_rank(const cli_args *a);
/* The most ranks (stages) a pipeline has. */
#define PIPELINE_MAX_RANKS 64
/* Rank 0 of a pipeline of two stages or more: their number; else 0. */
int pipeline_stages(void);
/* What stage r (0 .. pipeline_stages() - 1) has done so far, asked of its
 * rank: its layers [first, end), its engine's counters, the seconds it
 * computed and waited for work (stage 0: only its layers; its counters
 * are the caller's engine's). */
typedef struct pipeline_stage {
    int first, end;
    ms_stats st;
    double t_compute, t_wait;
    char placement[256]; /* its experts' placement (ms_engine_placement) */
} pipeline_stage;
int pipeline_stage_stats(int r, pipeline_stage *out, ms_error *err);
/* Rank 0, --stats: one line per stage (layers, computing, waiting, bytes
 * read, hit rate). */
void pipeline_print_stats(void);

#endif
