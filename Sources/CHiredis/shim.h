#ifndef ENTITLE_CHIREDIS_SHIM_H
#define ENTITLE_CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#include <sys/time.h>
#endif
