/* SPDX-License-Identifier: MIT */
/*
 * tools/cli/replay/model.h - what caching.c and expandable.c share
 *
 * A block is a run of addresses inside one segment: allocated, free and
 * mapped (in its pool's size-ordered set), or -- in expandable segments
 * only -- unmapped (in its pool's address-ordered set).  The blocks of one
 * segment are a doubly linked list in address order; neighbours in it
 * tile the segment with no gap.  Each set is a sorted array of pointers
 * searched by bisection: a block's key must not change while it is in a
 * set, so callers take it out before they resize or move it (as PyTorch
 * does with its std::sets).
 */
#ifndef STALLOC_TOOLS_REPLAY_MODEL_H
#define STALLOC_TOOLS_REPLAY_MODEL_H

#include <stddef.h>

#include "replay.h"

struct xseg;

struct cm_block {
	uint64_t ptr, size;
	uint64_t stream;
	struct cm_pool *pool;
	struct cm_block *prev, *next;
	struct xseg *es; /* the expandable segment, or NULL */
	struct cm_block *all_prev, *all_next; /* every block of the model */
	bool allocated;
	bool mapped; /* always true outside expandable segments */
};

/* A sorted set of blocks. */
struct bset {
	struct cm_block **v;
	size_t n, cap;
	int (*cmp)(const struct cm_block *a, const struct cm_block *b);
};

struct cm_pool {
	struct bset blocks; /* free mapped blocks by (stream, size, ptr) */
	struct bset unmapped; /* unmapped blocks by (stream, ptr) */
	bool small;
};

/* An expandable segment: a VA range mapped in pages of @page bytes. */
struct xseg {
	uint64_t base, page;
	size_t nr_pages;
	unsigned char *mapped; /* one flag per page */
	uint64_t stream;
};

struct cmodel {
	struct cm_config cfg;
	struct cm_pool small, large;
	struct cm_stats st;
	uint64_t next_va; /* where the next segment's addresses start */
	struct cm_block *all; /* every block, for cm_destroy() */
	struct xseg **xs;
	size_t nr_xs, cap_xs;
};

/* caching.c */
void *cm_alloc_or_die(size_t n);
void bset_insert(struct bset *s, struct cm_block *b);
void bset_erase(struct bset *s, const struct cm_block *b);
size_t bset_lower_bound(const struct bset *s, const struct cm_block *key);
struct cm_block *cm_new_block(struct cmodel *m, uint64_t ptr, uint64_t size,
			      uint64_t stream, struct cm_pool *pool);
void cm_delete_block(struct cmodel *m, struct cm_block *b);
uint64_t cm_merge(struct cmodel *m, struct cm_block *dst, struct cm_block *src);
void cm_reserve(struct cmodel *m, uint64_t bytes);
void cm_unreserve(struct cmodel *m, uint64_t bytes);
uint64_t cm_new_va(struct cmodel *m, uint64_t bytes, uint64_t align);

/* expandable.c */
struct cm_block *xs_try_allocate(struct cmodel *m, uint64_t stream,
				 struct cm_pool *pool, uint64_t size);
void xs_release_pool(struct cmodel *m, struct cm_pool *pool,
		     struct cm_block **list, size_t n);
void xs_destroy_all(struct cmodel *m);

#endif /* STALLOC_TOOLS_REPLAY_MODEL_H */
