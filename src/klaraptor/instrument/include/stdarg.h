/* klaraptor instrument: the compiler's <stdarg.h>, for parsing with libclang. */
#ifndef KLARAPTOR_STDARG_H
#define KLARAPTOR_STDARG_H
typedef __builtin_va_list va_list;
typedef __builtin_va_list __gnuc_va_list;
#define __GNUC_VA_LIST 1
#define va_start(ap, param) __builtin_va_start(ap, param)
#define va_end(ap) __builtin_va_end(ap)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#define va_copy(dest, src) __builtin_va_copy(dest, src)
#define __va_copy(dest, src) __builtin_va_copy(dest, src)
#endif
