/* topology.c — see topology.h. NVML is loaded with dlopen("libnvidia-ml.so.1") so that there is no build
 * dependency on the driver; without it the GPUs are found on the PCI bus in sysfs. */
#include "topology.h"
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util.h"
#ifdef QWENFT_HAVE_CUDA
#include "cuda/topology_cuda.h"
#endif

/* ---- small helpers ---------------------------------------------------------------------------------------- */

static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (!fgets(buf, (int)cap, f)) buf[0] = 0;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

static void appendf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* "00000000:41:00.0" (NVML) or "0000:41:00.0" -> "0000:41:00.0", lower case */
static void norm_bus_id(const char *in, char *out, size_t cap) {
    size_t n = strlen(in);
    const char *p = n > 12 ? in + n - 12 : in;
    size_t k = strlen(p) < cap - 1 ? strlen(p) : cap - 1;
    memcpy(out, p, k);
    out[k] = 0;
    for (char *c = out; *c; c++) *c = (char)tolower((unsigned char)*c);
}

int qf_topology_pcie_gen(const char *speed) {
    double gts = 0;
    if (!speed || sscanf(speed, "%lf", &gts) != 1) return 0;
    if (gts >= 60) return 6;
    if (gts >= 30) return 5;
    if (gts >= 15) return 4;
    if (gts >= 7.5) return 3;
    if (gts >= 4.5) return 2;
    if (gts >= 2) return 1;
    return 0;
}

int qf_topology_count_visible(const char *v) {
    if (!v) return -1;
    int n = 0;
    const char *p = v;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        /* CUDA stops at the first invalid entry; "NoDevFiles" (Slurm without GPUs) and "-1" hide everything */
        if (!isdigit((unsigned char)*p) && strncmp(p, "GPU-", 4) && strncmp(p, "MIG-", 4)) break;
        n++;
        while (*p && *p != ',') p++;
    }
    return n;
}

/* PCIe link of a PCI function from sysfs */
static void sysfs_pcie(qf_topo_gpu *g) {
    char path[256], buf[64];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/current_link_speed", g->bus_id);
    if (!g->pcie_gen && read_line(path, buf, sizeof buf) == 0) g->pcie_gen = qf_topology_pcie_gen(buf);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/current_link_width", g->bus_id);
    if (!g->pcie_width && read_line(path, buf, sizeof buf) == 0) g->pcie_width = atoi(buf);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/max_link_speed", g->bus_id);
    if (!g->pcie_gen_max && read_line(path, buf, sizeof buf) == 0) g->pcie_gen_max = qf_topology_pcie_gen(buf);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/max_link_width", g->bus_id);
    if (!g->pcie_width_max && read_line(path, buf, sizeof buf) == 0) g->pcie_width_max = atoi(buf);
}

static int cmp_gpu(const void *a, const void *b) {
    return strcmp(((const qf_topo_gpu *)a)->bus_id, ((const qf_topo_gpu *)b)->bus_id);
}

/* NVIDIA display / 3D controllers on the PCI bus (NVSwitches are bridges, not counted) */
static int sysfs_gpus(qf_topo_node *n) {
    DIR *d = opendir("/sys/bus/pci/devices");
    if (!d) return 0;
    struct dirent *de;
    int count = 0;
    qf_topo_gpu found[QF_TOPO_MAX_GPUS];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512], vendor[32], cls[32], dev[32];
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/vendor", de->d_name);
        if (read_line(path, vendor, sizeof vendor) || strcmp(vendor, "0x10de")) continue;
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/class", de->d_name);
        if (read_line(path, cls, sizeof cls) || (strncmp(cls, "0x0300", 6) && strncmp(cls, "0x0302", 6))) continue;
        if (count < QF_TOPO_MAX_GPUS) {
            qf_topo_gpu *g = &found[count];
            memset(g, 0, sizeof *g);
            g->nvlinks = -1;
            norm_bus_id(de->d_name, g->bus_id, sizeof g->bus_id);
            snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/device", de->d_name);
            if (read_line(path, dev, sizeof dev)) dev[0] = 0;
            snprintf(g->name, sizeof g->name, "NVIDIA PCI device 10de:%s", dev[0] == '0' && dev[1] == 'x' ? dev + 2 : dev);
            sysfs_pcie(g);
        }
        count++;
    }
    closedir(d);
    int k = count < QF_TOPO_MAX_GPUS ? count : QF_TOPO_MAX_GPUS;
    qsort(found, (size_t)k, sizeof found[0], cmp_gpu);
    memcpy(n->gpu, found, (size_t)k * sizeof found[0]);
    return count;
}

/* ---- NVML, loaded at run time ------------------------------------------------------------------------------ */

typedef void *nvml_dev;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
    char reserved[64]; /* room in case a driver's struct grew */
} nvml_pci;

typedef struct {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*driver_version)(char *, unsigned);
    int (*count)(unsigned *);
    int (*handle)(unsigned, nvml_dev *);
    int (*name)(nvml_dev, char *, unsigned);
    int (*pci)(nvml_dev, nvml_pci *);
    int (*gen)(nvml_dev, unsigned *);
    int (*width)(nvml_dev, unsigned *);
    int (*gen_max)(nvml_dev, unsigned *);
    int (*width_max)(nvml_dev, unsigned *);
    int (*nvlink_state)(nvml_dev, unsigned, int *);
    int (*p2p)(nvml_dev, nvml_dev, int, int *);
} nvml_api;

static void *sym(void *lib, const char *name) { return dlsym(lib, name); }
#define NVML_LOAD(field, name)                          \
    do {                                                \
        void *s_ = sym(api->lib, name);                 \
        memcpy(&api->field, &s_, sizeof api->field);    \
    } while (0)

/* 0 when NVML is loaded and initialised */
static int nvml_open(nvml_api *api) {
    memset(api, 0, sizeof *api);
    api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) return -1;
    NVML_LOAD(init, "nvmlInit_v2");
    NVML_LOAD(shutdown, "nvmlShutdown");
    NVML_LOAD(driver_version, "nvmlSystemGetDriverVersion");
    NVML_LOAD(count, "nvmlDeviceGetCount_v2");
    NVML_LOAD(handle, "nvmlDeviceGetHandleByIndex_v2");
    NVML_LOAD(name, "nvmlDeviceGetName");
    NVML_LOAD(pci, "nvmlDeviceGetPciInfo_v3");
    NVML_LOAD(gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    NVML_LOAD(width, "nvmlDeviceGetCurrPcieLinkWidth");
    NVML_LOAD(gen_max, "nvmlDeviceGetMaxPcieLinkGeneration");
    NVML_LOAD(width_max, "nvmlDeviceGetMaxPcieLinkWidth");
    NVML_LOAD(nvlink_state, "nvmlDeviceGetNvLinkState");
    NVML_LOAD(p2p, "nvmlDeviceGetP2PStatus");
    if (!api->init || !api->count || !api->handle || api->init() != 0) {
        dlclose(api->lib);
        api->lib = NULL;
        return -1;
    }
    return 0;
}

static void nvml_close(nvml_api *api) {
    if (!api->lib) return;
    if (api->shutdown) api->shutdown();
    dlclose(api->lib);
    api->lib = NULL;
}

enum { NVML_NVLINK_MAX_LINKS = 18, NVML_P2P_CAPS_INDEX_READ = 0, NVML_P2P_STATUS_OK = 0 };

/* fills n->gpus, n->gpu[], p2p from NVML; 0 on success */
static int nvml_node(qf_topo_node *n) {
    nvml_api api;
    if (nvml_open(&api)) return -1;
    unsigned count = 0;
    if (api.count(&count) != 0) {
        nvml_close(&api);
        return -1;
    }
    char drv[96] = "?";
    if (api.driver_version) api.driver_version(drv, sizeof drv);
    snprintf(n->gpu_source, sizeof n->gpu_source, "NVML, driver %s", drv);
    n->gpus = (int)count;
    int k = n->gpus < QF_TOPO_MAX_GPUS ? n->gpus : QF_TOPO_MAX_GPUS;
    nvml_dev h[QF_TOPO_MAX_GPUS] = {0};
    for (int i = 0; i < k; i++) {
        qf_topo_gpu *g = &n->gpu[i];
        memset(g, 0, sizeof *g);
        g->nvlinks = -1;
        if (api.handle((unsigned)i, &h[i]) != 0) {
            h[i] = NULL;
            snprintf(g->name, sizeof g->name, "(not accessible)");
            continue;
        }
        if (!api.name || api.name(h[i], g->name, sizeof g->name) != 0) snprintf(g->name, sizeof g->name, "NVIDIA GPU");
        nvml_pci pci;
        memset(&pci, 0, sizeof pci);
        if (api.pci && api.pci(h[i], &pci) == 0) norm_bus_id(pci.bus_id, g->bus_id, sizeof g->bus_id);
        unsigned v;
        if (api.gen && api.gen(h[i], &v) == 0) g->pcie_gen = (int)v;
        if (api.width && api.width(h[i], &v) == 0) g->pcie_width = (int)v;
        if (api.gen_max && api.gen_max(h[i], &v) == 0) g->pcie_gen_max = (int)v;
        if (api.width_max && api.width_max(h[i], &v) == 0) g->pcie_width_max = (int)v;
        if (g->bus_id[0]) sysfs_pcie(g); /* whatever NVML did not say */
        if (api.nvlink_state) {
            int active = 0, any = 0;
            for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
                int st = 0;
                if (api.nvlink_state(h[i], l, &st) == 0) {
                    any = 1;
                    active += st != 0;
                }
            }
            g->nvlinks = any ? active : 0; /* "not supported" on every link: a PCIe-only GPU */
        }
    }
    if (api.p2p && k >= 2) {
        int ok = 0, all = 0;
        for (int i = 0; i < k; i++)
            for (int j = i + 1; j < k; j++) {
                if (!h[i] || !h[j]) continue;
                int st = -1;
                if (api.p2p(h[i], h[j], NVML_P2P_CAPS_INDEX_READ, &st) != 0) continue;
                all++;
                ok += st == NVML_P2P_STATUS_OK;
            }
        if (all) {
            n->p2p_pairs = ok;
            n->pairs = all;
            n->p2p = ok == all;
            snprintf(n->p2p_source, sizeof n->p2p_source, "NVML P2P status");
        }
    }
    nvml_close(&api);
    return 0;
}

/* ---- InfiniBand ------------------------------------------------------------------------------------------- */

static void ib_node(qf_topo_node *n) {
    DIR *d = opendir("/sys/class/infiniband");
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports", de->d_name);
        DIR *pd = opendir(path);
        if (!pd) continue;
        struct dirent *pe;
        while ((pe = readdir(pd))) {
            if (pe->d_name[0] == '.') continue;
            char state[64] = "", layer[64] = "", rate[64] = "";
            snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%s/state", de->d_name, pe->d_name);
            read_line(path, state, sizeof state);
            snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%s/link_layer", de->d_name, pe->d_name);
            read_line(path, layer, sizeof layer);
            snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%s/rate", de->d_name, pe->d_name);
            read_line(path, rate, sizeof rate);
            const char *st = strchr(state, ':') ? strchr(state, ':') + 1 : state; /* "4: ACTIVE" */
            while (*st == ' ') st++;
            n->ib_ports++;
            int active = !strcmp(st, "ACTIVE") && (!layer[0] || !strcmp(layer, "InfiniBand"));
            n->ib_active += active;
            appendf(n->ib, sizeof n->ib, "%s%s/%s %s %s%s%s", n->ib[0] ? ", " : "", de->d_name, pe->d_name,
                    layer[0] ? layer : "?", st[0] ? st : "?", rate[0] ? " " : "", rate);
        }
        closedir(pd);
    }
    closedir(d);
}

/* ---- the node, as its leader sees it ------------------------------------------------------------------------ */

static int consumer_no_p2p(const char *name) {
    /* GeForce RTX 40xx: the driver offers no P2P (and NCCL hangs or corrupts data where an old driver claimed it) */
    return strstr(name, "GeForce RTX 40") != NULL;
}

static void detect_node(qf_topo_node *n) {
    n->p2p = -1;
    snprintf(n->gpu_source, sizeof n->gpu_source, "none");
    if (nvml_node(n) != 0) {
        n->gpus = sysfs_gpus(n);
        if (n->gpus > 0) snprintf(n->gpu_source, sizeof n->gpu_source, "sysfs PCI scan (no NVML)");
    }
#ifdef QWENFT_HAVE_CUDA
    int vis = qf_cuda_topo_count();
    /* names for GPUs the PCI scan only knows by id */
    for (int i = 0; i < vis; i++) {
        qf_cuda_gpu cg;
        if (qf_cuda_topo_gpu(i, &cg)) continue;
        for (int j = 0; j < n->gpus && j < QF_TOPO_MAX_GPUS; j++)
            if (!strcmp(n->gpu[j].bus_id, cg.bus_id) && !strncmp(n->gpu[j].name, "NVIDIA PCI device", 17))
                snprintf(n->gpu[j].name, sizeof n->gpu[j].name, "%s", cg.name);
    }
    if (vis >= 2) {
        int ok = 0, all = 0;
        for (int a = 0; a < vis; a++)
            for (int b = 0; b < vis; b++) {
                if (a == b) continue;
                int r = qf_cuda_topo_p2p(a, b, NULL, NULL);
                if (r < 0) continue;
                all++;
                ok += r;
            }
        if (all) {
            int cuda_p2p = ok == all;
            if (n->p2p < 0) {
                n->p2p_pairs = ok / 2;
                n->pairs = all / 2;
                snprintf(n->p2p_source, sizeof n->p2p_source, "CUDA peer attributes of %d visible GPUs", vis);
                n->p2p = cuda_p2p;
            } else if (!cuda_p2p && n->p2p) {
                n->p2p = 0;
                appendf(n->p2p_source, sizeof n->p2p_source, "; CUDA peer attributes: no");
            }
        }
    }
#endif
    for (int i = 0; i < n->gpus && i < QF_TOPO_MAX_GPUS; i++)
        if (consumer_no_p2p(n->gpu[i].name) && n->gpus >= 2 && n->p2p != 0) {
            n->p2p = 0;
            if (!n->pairs) n->pairs = n->gpus * (n->gpus - 1) / 2;
            n->p2p_pairs = 0;
            snprintf(n->p2p_source, sizeof n->p2p_source, "%s: no P2P on GeForce RTX 40xx", n->gpu[i].name);
            break;
        }
    ib_node(n);
}

/* ---- collective detection ------------------------------------------------------------------------------------ */

void qf_topology_detect(qf_topology *t, const qf_comm *c) {
    memset(t, 0, sizeof *t);
    qf_topo_node *n = &t->node;
    if (c->local_rank == 0) {
        snprintf(n->host, sizeof n->host, "%.*s", (int)sizeof n->host - 1, c->hostname);
        n->ranks = c->local_size;
        n->first_rank = c->rank;
        detect_node(n);
    }
    MPI_Bcast(n, (int)sizeof *n, MPI_BYTE, 0, c->node);

    /* this rank's view */
#ifdef QWENFT_HAVE_CUDA
    t->visible_gpus = qf_cuda_topo_count();
    snprintf(t->visible_source, sizeof t->visible_source, "CUDA runtime");
#else
    int v = qf_topology_count_visible(getenv("CUDA_VISIBLE_DEVICES"));
    t->visible_gpus = v < 0 ? n->gpus : (v < n->gpus ? v : n->gpus);
    snprintf(t->visible_source, sizeof t->visible_source, "CUDA_VISIBLE_DEVICES");
#endif

    /* agreed over all ranks */
    int leader = c->local_rank == 0;
    /* hidden GPUs: with R ranks on a node of G GPUs every rank must see min(R, G) of them (one task per GPU, each
     * selecting GPU local_rank, NCCL seeing its peers); a shared node that gave the job only some GPUs is fine */
    int need = n->ranks < n->gpus ? n->ranks : n->gpus;
    int hiding = n->ranks > 1 && t->visible_gpus < need;
    int mins[3] = {n->ranks, n->gpus, hiding ? c->rank : INT_MAX};
    int maxs[2] = {n->ranks, n->gpus};
    int sums[4] = {leader && n->gpus >= 2 && n->p2p == 0, leader && n->ib_active == 0, hiding,
                   leader && n->gpus > 0 && n->ranks > n->gpus};
    MPI_Allreduce(MPI_IN_PLACE, mins, 3, MPI_INT, MPI_MIN, c->world);
    MPI_Allreduce(MPI_IN_PLACE, maxs, 2, MPI_INT, MPI_MAX, c->world);
    MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_INT, MPI_SUM, c->world);
    t->world_size = c->world_size;
    t->n_nodes = c->n_nodes;
    t->ranks_per_node_min = mins[0];
    t->node_gpus_min = mins[1];
    t->ranks_per_node_max = maxs[0];
    t->node_gpus_max = maxs[1];
    t->nodes_without_p2p = sums[0];
    t->nodes_without_ib = sums[1];
    t->hiding_ranks = sums[2];
    t->oversubscribed_nodes = sums[3];
    if (t->hiding_ranks) {
        int ex[3] = {mins[2], t->visible_gpus, n->gpus};
        MPI_Bcast(ex, 3, MPI_INT, mins[2], c->world);
        t->hiding_example_rank = ex[0];
        t->hiding_example_seen = ex[1];
        t->hiding_example_node_gpus = ex[2];
    }

    /* rank 0: one entry per node */
    enum { ENTRY = 160 };
    if (leader) {
        char mine[ENTRY];
        snprintf(mine, sizeof mine, "%s (%d rank%s from rank %d, %d GPU%s%s%s)", n->host, n->ranks,
                 n->ranks == 1 ? "" : "s", n->first_rank, n->gpus, n->gpus == 1 ? "" : "s",
                 n->gpus >= 2 && n->p2p == 0 ? ", no P2P" : "", n->ib_active ? ", InfiniBand" : "");
        int nl = 1;
        MPI_Comm_size(c->leaders, &nl);
        char *all = c->rank == 0 ? qf_malloc((size_t)nl * ENTRY) : NULL;
        MPI_Gather(mine, ENTRY, MPI_CHAR, all, ENTRY, MPI_CHAR, 0, c->leaders);
        if (c->rank == 0) {
            size_t cap = (size_t)nl * (ENTRY + 2) + 64;
            t->nodes_text = qf_calloc(cap, 1);
            for (int i = 0; i < nl; i++) {
                if (nl > 12 && i == 8) {
                    appendf(t->nodes_text, cap, ", ... (%d more)", nl - 10);
                    i = nl - 2;
                }
                appendf(t->nodes_text, cap, "%s%s", i ? ", " : "", all + (size_t)i * ENTRY);
            }
            free(all);
        }
    }
}

void qf_topology_free(qf_topology *t) {
    free(t->nodes_text);
    t->nodes_text = NULL;
}

/* ---- NCCL environment policy ------------------------------------------------------------------------------- */

int qf_topology_nccl_env(const qf_topology *t, int apply, char *msg, size_t cap) {
    msg[0] = 0;
    if (t->node_gpus_max == 0) {
        snprintf(msg, cap, "NCCL: not used (no GPU visible; CPU ranks exchange through MPI)");
        return 0;
    }
    int want_p2p_off = t->nodes_without_p2p > 0;
    int want_ib_off = want_p2p_off && t->nodes_without_ib > 0;
    const char *names[2] = {"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"};
    int want[2] = {want_p2p_off, want_ib_off};
    int set = 0;
    char did[256] = "", kept[256] = "";
    for (int i = 0; i < 2; i++) {
        const char *user = getenv(names[i]);
        if (user) {
            appendf(kept, sizeof kept, "%s%s=%s", kept[0] ? ", " : "", names[i], user);
        } else if (want[i]) {
            if (apply) setenv(names[i], "1", 1);
            appendf(did, sizeof did, "%s%s=1", did[0] ? " and " : "", names[i]);
            set++;
        }
    }
    char why[256] = "";
    if (want_p2p_off)
        snprintf(why, sizeof why, "%s without P2P between GPUs%s", t->nodes_without_p2p == t->n_nodes ? "nodes" : "some nodes",
                 want_ib_off ? " and without InfiniBand" : "");
    if (did[0])
        snprintf(msg, cap, "NCCL: %s %s (%s)", apply ? "set" : "will set", did, why);
    else if (want_p2p_off)
        snprintf(msg, cap, "NCCL: %s (%s; nothing set)", why, kept[0] ? "the user's settings apply" : "defaults");
    else
        snprintf(msg, cap, "NCCL: defaults (P2P available between GPUs%s)",
                 t->nodes_without_ib == 0 ? "; InfiniBand on every node" : "");
    if (kept[0]) appendf(msg, cap, "; kept the user's %s", kept);
    return set;
}

/* ---- printing ---------------------------------------------------------------------------------------------- */

static void print_gpu_summary(const qf_topo_node *n, FILE *f) {
    int k = n->gpus < QF_TOPO_MAX_GPUS ? n->gpus : QF_TOPO_MAX_GPUS;
    /* distinct names with counts */
    char names[512] = "";
    int done[QF_TOPO_MAX_GPUS] = {0};
    for (int i = 0; i < k; i++) {
        if (done[i]) continue;
        int cnt = 0;
        for (int j = i; j < k; j++)
            if (!done[j] && !strcmp(n->gpu[i].name, n->gpu[j].name)) {
                done[j] = 1;
                cnt++;
            }
        appendf(names, sizeof names, "%s%d x %s", names[0] ? ", " : "", cnt, n->gpu[i].name);
    }
    if (n->gpus > k) appendf(names, sizeof names, ", ... (%d in all)", n->gpus);
    const qf_topo_gpu *g = &n->gpu[0];
    fprintf(f, "GPUs (node %s; %s): %s", n->host, n->gpu_source, names);
    if (g->pcie_gen || g->pcie_width)
        fprintf(f, " | PCIe gen %d x%d (max gen %d x%d)", g->pcie_gen, g->pcie_width, g->pcie_gen_max, g->pcie_width_max);
    if (g->nvlinks > 0) fprintf(f, " | NVLink: %d links", g->nvlinks);
    else if (g->nvlinks == 0) fprintf(f, " | no NVLink");
    if (n->gpus >= 2) {
        if (n->p2p < 0) fprintf(f, " | P2P: unknown");
        else fprintf(f, " | P2P: %s (%d of %d pairs; %s)", n->p2p ? "yes" : "no", n->p2p_pairs, n->pairs, n->p2p_source);
    }
    fprintf(f, "\n");
}

void qf_topology_print(const qf_topology *t, FILE *f, int verbose, const char *nccl_line) {
    const qf_topo_node *n = &t->node;
    fprintf(f, "nodes: %s\n", t->nodes_text ? t->nodes_text : n->host);
    if (n->gpus == 0) {
        fprintf(f, "GPUs: no GPU visible on node %s (no NVML, no NVIDIA device on the PCI bus); CPU ranks\n", n->host);
    } else {
        print_gpu_summary(n, f);
        if (verbose) {
            int k = n->gpus < QF_TOPO_MAX_GPUS ? n->gpus : QF_TOPO_MAX_GPUS;
            for (int i = 0; i < k; i++) {
                const qf_topo_gpu *g = &n->gpu[i];
                fprintf(f, "  GPU %d: %s | %s | PCIe gen %d x%d (max gen %d x%d)", i, g->name,
                        g->bus_id[0] ? g->bus_id : "?", g->pcie_gen, g->pcie_width, g->pcie_gen_max, g->pcie_width_max);
                if (g->nvlinks >= 0) fprintf(f, " | NVLink links active: %d", g->nvlinks);
                fprintf(f, "\n");
            }
            fprintf(f, "GPUs this rank sees (%s): %d\n", t->visible_source, t->visible_gpus);
        }
        if (t->node_gpus_min != t->node_gpus_max)
            fprintf(f, "note: nodes differ: %d to %d GPUs per node\n", t->node_gpus_min, t->node_gpus_max);
    }
    if (n->ib_ports) fprintf(f, "InfiniBand (node %s): %d active port%s: %s\n", n->host, n->ib_active,
                             n->ib_active == 1 ? "" : "s", n->ib);
    else fprintf(f, "InfiniBand (node %s): none (/sys/class/infiniband is empty or absent)\n", n->host);
    if (nccl_line && nccl_line[0]) fprintf(f, "%s\n", nccl_line);
    if (t->hiding_ranks)
        fprintf(f, "warning: %d rank%s see%s fewer GPUs than the ranks of the node use (rank %d sees %d; its node has %d; "
                   "CUDA_VISIBLE_DEVICES=%s on rank 0): the binding hides GPUs, and NCCL cannot use P2P/NVLink to a GPU a "
                   "rank cannot see. Start one task per GPU with every GPU of the job visible (srun --gpus-per-node=N "
                   "--gpu-bind=none, no --gpus-per-task); each rank selects GPU local_rank.\n",
                t->hiding_ranks, t->hiding_ranks == 1 ? "" : "s", t->hiding_ranks == 1 ? "s" : "", t->hiding_example_rank,
                t->hiding_example_seen, t->hiding_example_node_gpus,
                getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    if (t->oversubscribed_nodes)
        fprintf(f, "warning: %d node%s run more ranks than they have GPUs (up to %d ranks per node); GPUs would be "
                   "shared\n", t->oversubscribed_nodes, t->oversubscribed_nodes == 1 ? "" : "s", t->ranks_per_node_max);
}
