build/obj/vmm/backend-cuda.o: vmm/backend-cuda.c vmm/../lib/util.h \
 include/stalloc/stalloc.h vmm/backend.h
vmm/../lib/util.h:
include/stalloc/stalloc.h:
vmm/backend.h:
