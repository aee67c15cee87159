/* An AVX2-only CPU, as the programs of this process see it: CPUID without AVX-512, VNNI or AMX.
 *
 * Loaded with LD_PRELOAD on Linux x86-64 where the CPU can fault on CPUID (/proc/cpuinfo's "cpuid_fault"
 * flag). At load it makes CPUID fault for this thread (arch_prctl ARCH_SET_CPUID, inherited by the threads
 * and forks it makes; an exec loads this again). Each fault is answered by the real CPUID with the masked
 * bits cleared. Libraries that choose kernels by CPUID (ONNX Runtime's MLAS, oneDNN in PyTorch and
 * OpenVINO, numpy) then take their AVX2 paths, natively. The C library's own string functions chose theirs
 * before this loads. A handler the program installs for SIGSEGV is kept and called for every other fault.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int active;
static struct sigaction theirs; /* the program's SIGSEGV disposition */
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static long set_cpuid(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static void masked_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
	set_cpuid(1);
	__asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
	set_cpuid(0);
	if (leaf == 7 && sub == 0) {
		/* EBX: AVX512 F DQ IFMA PF ER CD BW VL */
		r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
		/* ECX: AVX512 VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
		r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
		/* EDX: AVX512 4VNNIW 4FMAPS VP2INTERSECT, AMX BF16, AVX512 FP16, AMX TILE INT8 */
		r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
	} else if (leaf == 7 && sub == 1) {
		/* EAX: AVX-VNNI, AVX512 BF16, AMX FP16, AVX-IFMA; EDX: AVX-VNNI-INT8, AVX-NE-CONVERT, AMX COMPLEX, AVX10 */
		r[0] &= ~((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23));
		r[3] &= ~((1u << 4) | (1u << 5) | (1u << 8) | (1u << 19));
	} else if (leaf == 0xd && sub == 0) {
		/* XSAVE state components: no opmask, ZMM or tile state offered */
		r[0] &= ~((1u << 5) | (1u << 6) | (1u << 7) | (1u << 17) | (1u << 18));
	}
}

static void pass_on(int sig, siginfo_t *info, void *ctx) {
	if (theirs.sa_flags & SA_SIGINFO) {
		if (theirs.sa_sigaction) {
			theirs.sa_sigaction(sig, info, ctx);
			return;
		}
	} else if (theirs.sa_handler != SIG_DFL && theirs.sa_handler != SIG_IGN) {
		theirs.sa_handler(sig);
		return;
	}
	/* default: die of the fault the way the program would have */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	real_sigaction(SIGSEGV, &dfl, NULL);
}

static void on_segv(int sig, siginfo_t *info, void *ctx) {
	ucontext_t *uc = ctx;
	greg_t *g = uc->uc_mcontext.gregs;
	const uint8_t *ip = (const uint8_t *)g[REG_RIP];
	if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
		uint32_t r[4];
		masked_cpuid((uint32_t)g[REG_RAX], (uint32_t)g[REG_RCX], r);
		g[REG_RAX] = r[0];
		g[REG_RBX] = r[1];
		g[REG_RCX] = r[2];
		g[REG_RDX] = r[3];
		g[REG_RIP] += 2;
		return;
	}
	pass_on(sig, info, ctx);
}

static void install(void) {
	struct sigaction ours;
	memset(&ours, 0, sizeof ours);
	ours.sa_sigaction = on_segv;
	ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&ours.sa_mask);
	real_sigaction(SIGSEGV, &ours, NULL);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
	if (!real_sigaction) real_sigaction = dlsym(RTLD_NEXT, "sigaction");
	if (!active || sig != SIGSEGV) return real_sigaction(sig, act, old);
	if (old) *old = theirs;
	if (act) theirs = *act;
	return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
	struct sigaction act, old;
	memset(&act, 0, sizeof act);
	act.sa_handler = handler;
	act.sa_flags = SA_RESTART;
	sigemptyset(&act.sa_mask);
	if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
	return old.sa_handler;
}

__attribute__((constructor)) static void start(void) {
	if (!real_sigaction) real_sigaction = dlsym(RTLD_NEXT, "sigaction");
	real_sigaction(SIGSEGV, NULL, &theirs);
	install();
	if (set_cpuid(0) != 0) return; /* no CPUID faulting here: the CPU stays as it is */
	active = 1;
}
