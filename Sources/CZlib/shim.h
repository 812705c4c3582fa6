#ifndef ENTITLE_CZLIB_SHIM_H
#define ENTITLE_CZLIB_SHIM_H
#include <zlib.h>
#endif
