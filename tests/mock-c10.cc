// SPDX-License-Identifier: MIT
/*
 * tests/mock-c10.cc - a libc10.so standing in for PyTorch's, for
 * tests/torch-shim-test.cc
 *
 * The parts of c10/util/Exception.h the shim relies on: SourceLocation's
 * three fields; Error, derived from std::exception, with an exported
 * constructor Error(SourceLocation, std::string) and a virtual what();
 * OutOfMemoryError adding only a type.  The Makefile builds it twice, in
 * the C++11 and in the pre-C++11 string ABI.  mock_c10_catch() catches as
 * PyTorch's Python bindings do (torch/csrc/Exceptions.h): OutOfMemoryError
 * first, then Error, then std::exception.  mock_c10_live counts the Errors
 * that exist (the shim must destroy those it throws).  No locks: the test
 * is single-threaded.
 */
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#define MOCK_API extern "C" __attribute__((visibility("default")))

MOCK_API int mock_c10_live;
int mock_c10_live;

namespace c10
{

struct SourceLocation {
	const char *function;
	const char *file;
	uint32_t line;
};

class __attribute__((visibility("default"))) Error : public std::exception {
    public:
	Error(SourceLocation loc, std::string msg);
	~Error() override;
	const char *what() const noexcept override;

    private:
	std::string msg_;
	std::vector<std::string> context_;
	std::string what_;
	const void *caller_ = nullptr;
};

class OutOfMemoryError : public Error {
	using Error::Error;
};

Error::Error(SourceLocation loc, std::string msg) : msg_(std::move(msg))
{
	what_ = msg_ + " (raised from " + loc.function + " at " + loc.file +
		":" + std::to_string(loc.line) + ")";
	mock_c10_live++;
}

Error::~Error()
{
	mock_c10_live--;
}

const char *Error::what() const noexcept
{
	return what_.c_str();
}

} // namespace c10

/*
 * Call @fn(@arg); 0 if it returns; else what caught its exception, its
 * what() in @what: 1 OutOfMemoryError, 2 Error (the only handler with
 * @base_only), 3 std::exception, 4 anything else.
 */
MOCK_API int mock_c10_catch(void (*fn)(void *), void *arg, bool base_only,
			    char *what, size_t len)
{
	snprintf(what, len, "%s", "");
	try {
		if (base_only) {
			try {
				fn(arg);
				return 0;
			} catch (const c10::Error &e) {
				snprintf(what, len, "%s", e.what());
				return 2;
			}
		}
		fn(arg);
		return 0;
	} catch (const c10::OutOfMemoryError &e) {
		snprintf(what, len, "%s", e.what());
		return 1;
	} catch (const c10::Error &e) {
		snprintf(what, len, "%s", e.what());
		return 2;
	} catch (const std::exception &e) {
		snprintf(what, len, "%s", e.what());
		return 3;
	} catch (...) {
		return 4;
	}
}
