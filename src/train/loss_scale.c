/* loss_scale.c — see loss_scale.h; follows deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale. */
#include "loss_scale.h"
#include <math.h>

void qf_loss_scale_init(const qf_deck *d, qf_train_state *s) {
    if (!d->fp16) s->loss_scale = 1.0;
    else if (d->fp16_loss_scale > 0) s->loss_scale = d->fp16_loss_scale;
    else s->loss_scale = ldexp(1.0, d->fp16_initial_scale_power);
    s->ls_cur_iter = 0;
    s->ls_last_overflow = -1;
    s->ls_hysteresis = d->fp16_hysteresis;
}

void qf_loss_scale_update(const qf_deck *d, qf_train_state *s, int overflow) {
    if (!d->fp16 || d->fp16_loss_scale > 0) return;
    if (overflow) {
        if (d->fp16_hysteresis == 1 || s->ls_hysteresis == 1) {
            double ns = s->loss_scale / 2.0;
            s->loss_scale = ns < d->fp16_min_loss_scale ? d->fp16_min_loss_scale : ns;
        } else {
            s->ls_hysteresis--;
        }
        s->ls_last_overflow = s->ls_cur_iter;
    } else {
        if (d->fp16_consecutive_hysteresis) s->ls_hysteresis = d->fp16_hysteresis;
        if ((s->ls_cur_iter - s->ls_last_overflow) % d->fp16_loss_scale_window == 0) {
            if (!d->fp16_consecutive_hysteresis) s->ls_hysteresis = d->fp16_hysteresis;
            s->loss_scale *= 2.0;
        }
    }
    s->ls_cur_iter++;
}
