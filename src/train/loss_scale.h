/* loss_scale.h — DeepSpeed's DynamicLossScaler (fp16): initial 2^initial_scale_power; on overflow the step is
 * skipped and the scale halves once `hysteresis` overflows have been absorbed (never below min_loss_scale); after
 * loss_scale_window steps without overflow it doubles. A static loss_scale > 0 disables the dynamics. */
#ifndef QF_LOSS_SCALE_H
#define QF_LOSS_SCALE_H
#include "store/checkpoint.h"
#include "deck/deck.h"

void qf_loss_scale_init(const qf_deck *d, qf_train_state *s);
/* Updates s after a step that did (overflow=1) or did not overflow. */
void qf_loss_scale_update(const qf_deck *d, qf_train_state *s, int overflow);

#endif
