/* grads_home.c — offload_optimizer.gradients = auto: where the gradient shard lives (see estimate.h). */
#include "estimate.h"
#include <stdio.h>

void qf_plan_grads_home(qf_deck *d, const qf_model_config *c, int W, int G, int64_t ab, int64_t budget, char *why,
                        size_t n) {
    const double gib = 1073741824.0;
    const int eligible = d->offload_optimizer == QF_OFFLOAD_CPU && d->zero_stage >= 2 && d->offload_optimizer_ratio >= 1;
    if (d->offload_optimizer_gradients != QF_GRADS_AUTO) {
        snprintf(why, n, "set by the deck");
        return;
    }
    d->offload_optimizer_gradients = QF_GRADS_DEVICE;
    if (!eligible) {
        snprintf(why, n, "auto: only with offload_optimizer at stage 2-3 and ratio 1");
        return;
    }
    if (budget <= 0) {
        snprintf(why, n, "auto: no device budget (CPU ranks hold it in host memory either way)");
        return;
    }
    qf_mem_estimate dev, host;
    qf_estimate(c, d, W, G, ab, &dev);
    d->offload_optimizer_gradients = QF_GRADS_HOST;
    qf_estimate(c, d, W, G, ab, &host);
    /* the plan counts the engine's and the model's buffers; the backend's scratch and cuBLASLt workspace come on
     * top (a few hundred MiB): half a GiB of margin */
    const int64_t margin = (int64_t)1 << 29;
    const int fits = dev.device_total + margin <= budget;
    d->offload_optimizer_gradients = fits ? QF_GRADS_DEVICE : QF_GRADS_HOST;
    snprintf(why, n, "auto: the plan with the shard on the device needs %.2f GiB + 0.5 of %.2f GiB, on the host %.2f GiB",
             (double)dev.device_total / gib, (double)budget / gib, (double)host.device_total / gib);
}
