// SPDX-License-Identifier: MIT
// tests/header-cxx.cc - the public headers compile as C++ (make check).
#include <stalloc/stalloc.h>

static_assert(STALLOC_VERSION ==
		      STALLOC_VERSION_NUM(STALLOC_VERSION_MAJOR,
					  STALLOC_VERSION_MINOR,
					  STALLOC_VERSION_PATCH),
	      "version macros agree");

int cxx_probe(void);
int cxx_probe(void)
{
	return stalloc_version() + (stalloc_last_error() != nullptr);
}
