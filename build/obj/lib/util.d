build/obj/lib/util.o: lib/util.c lib/util.h include/stalloc/stalloc.h
lib/util.h:
include/stalloc/stalloc.h:
