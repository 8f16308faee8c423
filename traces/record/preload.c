// preload.c: an LD_PRELOAD library that records the aligned allocations of a
// process as a trace in gpualloc's native format.
//
// PyTorch's CPU allocator (c10::alloc_cpu) takes memory with posix_memalign
// and returns it with free. This library wraps both: every posix_memalign
// that succeeds is an "alloc" line, and a free of a pointer that one of them
// returned is a "free" line. Frees of other pointers (malloc's, or aligned
// blocks taken before recording started) write nothing. Lines look like
//
//	op,id,size,stream,time_us
//	alloc,0x7f3a12340040,4096,0,1532
//	free,0x7f3a12340040,,0,1610
//
// with time in microseconds of CLOCK_MONOTONIC since recording started.
//
// Environment:
//
//	GPUALLOC_TRACE        the file to write; unset: record nothing
//	GPUALLOC_TRACE_START  "mark" to write nothing until gpualloc_start();
//	                      otherwise recording starts when the library loads
//
// Exported functions, for ctypes:
//
//	void gpualloc_mark(const char *phase)  writes "# phase: PHASE"
//	void gpualloc_start(void)              starts writing events, at time 0
//	void gpualloc_stop(void)               writes a free for every recorded
//	                                       allocation still live (after a
//	                                       "# phase: end" line), then stops
//
// Allocations are tracked from load time, whether written or not, so that a
// block taken before gpualloc_start and freed after it is not written either.
// Everything runs under one mutex: the order of lines is the order in which
// the allocator saw the calls, so an address is never allocated twice while
// live in the trace. A free's line is written before the memory goes back to
// libc, and an alloc's after libc handed it out.
//
// Build: gcc -O2 -shared -fPIC -o libgpualloc_record.so preload.c -ldl -lpthread
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void (*free_fn)(void *);

static posix_memalign_fn real_posix_memalign;
static free_fn real_free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int busy __attribute__((tls_model("initial-exec"))); // this thread is inside the library
static int resolving;      // dlsym is running
static int fd = -1;        // the trace; -1: not recording
static int writing;        // events are written
static struct timespec t0;

// While dlsym runs, allocations come from here; frees of it are ignored.
static char bootstrap[64 << 10] __attribute__((aligned(4096)));
static size_t bootstrap_used;

static int in_bootstrap(const void *p) {
	return (const char *)p >= bootstrap && (const char *)p < bootstrap + sizeof bootstrap;
}

// The live aligned allocations: an open-addressing hash set of pointers,
// with linear probing and backward-shift deletion. Each entry keeps whether
// its alloc was written. Its memory comes from mmap, not from malloc.
struct entry {
	uintptr_t ptr; // 0: empty
	uintptr_t written;
};
static struct entry *table;
static size_t table_cap, table_len; // cap is a power of two

static size_t slot_of(uintptr_t p, size_t cap) {
	uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 20) & (cap - 1);
}

static int table_grow(void) {
	size_t cap = table_cap ? table_cap * 2 : 1 << 16;
	struct entry *t = mmap(NULL, cap * sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED)
		return -1;
	for (size_t i = 0; i < table_cap; i++) {
		if (!table[i].ptr)
			continue;
		size_t j = slot_of(table[i].ptr, cap);
		while (t[j].ptr)
			j = (j + 1) & (cap - 1);
		t[j] = table[i];
	}
	if (table)
		munmap(table, table_cap * sizeof *table);
	table = t;
	table_cap = cap;
	return 0;
}

static void table_insert(uintptr_t p, int written) {
	if ((table_len + 1) * 4 > table_cap * 3 && table_grow() != 0)
		return; // out of memory: the pointer goes untracked, its free unwritten
	size_t i = slot_of(p, table_cap);
	while (table[i].ptr && table[i].ptr != p)
		i = (i + 1) & (table_cap - 1);
	if (!table[i].ptr)
		table_len++;
	table[i].ptr = p;
	table[i].written = written;
}

// table_remove deletes p; it returns -1 if p was absent, else whether its
// alloc was written.
static int table_remove(uintptr_t p) {
	if (!table_cap)
		return -1;
	size_t mask = table_cap - 1, i = slot_of(p, table_cap);
	while (table[i].ptr != p) {
		if (!table[i].ptr)
			return -1;
		i = (i + 1) & mask;
	}
	int written = (int)table[i].written;
	// Backward shift: move later entries of the run into the hole.
	size_t hole = i;
	for (size_t j = (i + 1) & mask; table[j].ptr; j = (j + 1) & mask) {
		size_t home = slot_of(table[j].ptr, table_cap);
		// j may move to hole if home is not in (hole, j], cyclically.
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			table[hole] = table[j];
			hole = j;
		}
	}
	table[hole].ptr = 0;
	table[hole].written = 0;
	table_len--;
	return written;
}

// Output: a buffer flushed with write(2); no stdio, which could allocate.
static char out[1 << 16];
static size_t out_len;

static void flush(void) {
	size_t off = 0;
	while (off < out_len) {
		ssize_t n = write(fd, out + off, out_len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; // nothing sensible to do in an allocator
		off += (size_t)n;
	}
	out_len = 0;
}

static void put(const char *s, size_t n) {
	if (out_len + n > sizeof out)
		flush();
	if (n > sizeof out)
		n = sizeof out;
	memcpy(out + out_len, s, n);
	out_len += n;
}

static void put_str(const char *s) { put(s, strlen(s)); }

static void put_dec(uint64_t v) {
	char b[24];
	int i = sizeof b;
	do {
		b[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(b + i, sizeof b - (size_t)i);
}

static void put_hex(uint64_t v) {
	char b[24];
	int i = sizeof b;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	b[--i] = 'x';
	b[--i] = '0';
	put(b + i, sizeof b - (size_t)i);
}

static uint64_t now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	int64_t ns = (int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec);
	return ns < 0 ? 0 : (uint64_t)ns / 1000;
}

// event writes one line; the caller holds the lock.
static void event(int alloc, uintptr_t p, size_t size) {
	put_str(alloc ? "alloc," : "free,");
	put_hex(p);
	put_str(",");
	if (alloc)
		put_dec(size);
	put_str(",0,");
	put_dec(now_us());
	put_str("\n");
}

static void resolve(void) {
	if (real_posix_memalign && real_free)
		return;
	resolving = 1;
	real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
	real_free = (free_fn)dlsym(RTLD_NEXT, "free");
	resolving = 0;
}

__attribute__((constructor)) static void init(void) {
	busy++;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	resolve();
	const char *path = getenv("GPUALLOC_TRACE");
	if (path && *path) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			const char *start = getenv("GPUALLOC_TRACE_START");
			writing = !(start && strcmp(start, "mark") == 0);
			pthread_mutex_lock(&lock);
			put_str("# gpualloc trace v1\n"
				"# posix_memalign and free of one process, recorded by traces/record/preload.c\n"
				"op,id,size,stream,time_us\n");
			flush();
			pthread_mutex_unlock(&lock);
		}
	}
	busy--;
}

__attribute__((destructor)) static void fini(void) {
	busy++;
	pthread_mutex_lock(&lock);
	if (fd >= 0)
		flush();
	pthread_mutex_unlock(&lock);
	busy--;
}

int posix_memalign(void **memptr, size_t alignment, size_t size) {
	if (!real_posix_memalign) {
		if (resolving) { // dlsym itself allocating: serve from bootstrap
			size_t a = alignment < 16 ? 16 : alignment;
			size_t off = (bootstrap_used + a - 1) & ~(a - 1);
			if (off + size > sizeof bootstrap)
				return ENOMEM;
			bootstrap_used = off + size;
			*memptr = bootstrap + off;
			return 0;
		}
		resolve();
		if (!real_posix_memalign)
			return ENOMEM;
	}
	int err = real_posix_memalign(memptr, alignment, size);
	if (err != 0 || fd < 0 || busy)
		return err;
	busy++;
	pthread_mutex_lock(&lock);
	table_insert((uintptr_t)*memptr, writing);
	if (writing)
		event(1, (uintptr_t)*memptr, size);
	pthread_mutex_unlock(&lock);
	busy--;
	return err;
}

void free(void *p) {
	if (!p || in_bootstrap(p))
		return;
	if (!real_free) {
		if (resolving)
			return; // leak what dlsym frees while we resolve free itself
		resolve();
		if (!real_free)
			return;
	}
	if (fd >= 0 && !busy) {
		busy++;
		pthread_mutex_lock(&lock);
		if (table_remove((uintptr_t)p) == 1)
			event(0, (uintptr_t)p, 0);
		pthread_mutex_unlock(&lock);
		busy--;
	}
	real_free(p);
}

void gpualloc_mark(const char *phase) {
	if (fd < 0)
		return;
	busy++;
	pthread_mutex_lock(&lock);
	put_str("# phase: ");
	for (const char *s = phase; s && *s; s++) // one line, whatever phase holds
		put(*s == '\n' || *s == '\r' ? " " : s, 1);
	put_str("\n");
	flush();
	pthread_mutex_unlock(&lock);
	busy--;
}

void gpualloc_start(void) {
	if (fd < 0)
		return;
	busy++;
	pthread_mutex_lock(&lock);
	if (!writing)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	writing = 1;
	pthread_mutex_unlock(&lock);
	busy--;
}

void gpualloc_stop(void) {
	if (fd < 0)
		return;
	busy++;
	pthread_mutex_lock(&lock);
	if (writing) {
		put_str("# phase: end (allocations still live are freed here)\n");
		for (size_t i = 0; i < table_cap; i++) {
			if (table[i].ptr && table[i].written) {
				event(0, table[i].ptr, 0);
				table[i].written = 0;
			}
		}
	}
	writing = 0;
	flush();
	pthread_mutex_unlock(&lock);
	busy--;
}
